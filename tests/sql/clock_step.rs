//! Steps of the database server's wall clock, on a private Postgres with
//! `scripts/clock_shift.c` preloaded (see [`PrivateServer::with_clock`]).
//! The table mode keeps a hold's lease as a time of the server's clock
//! (`expires_at`, compared with `now()`), so a step forward ends leases
//! early — another owner takes a held name while its holder still counts
//! on its lease — and a step back makes them last longer. The table mode
//! does not guard against it today (docs/clocks.md); these tests show what
//! happens. (The session mode's locks have no lease: unaffected.)
//!
//! Both tests step the one private server's clock, so they run one at a
//! time.
#![cfg(feature = "postgres")]

use std::time::Duration;

use lockkit::LockOptions;
use tokio::sync::{Mutex, MutexGuard};

use crate::common::{assert_a_longer_lease_after_a_step_back, assert_a_second_owner_after_a_step, tag};
use crate::private_server::{PrivateServer, available};

/// The private server's clock is one for both tests.
static CLOCK: Mutex<()> = Mutex::const_new(());

/// The stepped server, started, this test's alone while the value lives;
/// its clock is set right again when the test ends.
struct Stepped {
    server: PrivateServer,
    url: String,
    _one: MutexGuard<'static, ()>,
}

impl Stepped {
    /// `None`: Postgres is not set up here (and not required).
    async fn start() -> Option<Stepped> {
        if !available("LOCKKIT_POSTGRES_URL") {
            return None;
        }
        let one = CLOCK.lock().await;
        let server = PrivateServer::with_clock("postgres", "15443");
        server.shift_clock(0);
        let url = server.up();
        Some(Stepped { server, url, _one: one })
    }
}

impl Drop for Stepped {
    fn drop(&mut self) {
        self.server.shift_clock(0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_lets_another_owner_take_a_held_name() {
    let Some(server) = Stepped::start().await else {
        return;
    };
    let (a, b) = (
        lockkit::connect(&server.url).await.expect("connect"),
        lockkit::connect(&server.url).await.expect("connect"),
    );
    let name = format!("clock/forward/{}", tag());
    let opts = LockOptions::new().ttl(Duration::from_secs(20));
    let ga = a.lock_with(&name, &opts).await.expect("A locks");
    assert!(b.try_lock(&name).await.expect("B's try").is_none(), "held by A");
    // 30 s later on the server's clock: A's lease (20 s, extended every
    // third of it) ended there, while A counts on it for 20 s more.
    server.server.shift_clock(30_000);
    assert_a_second_owner_after_a_step(&ga, b.try_lock_with(&name, &opts).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_makes_a_lease_last_longer() {
    let Some(server) = Stepped::start().await else {
        return;
    };
    let a = lockkit::connect(&server.url).await.expect("connect");
    let name = format!("clock/back/{}", tag());
    let fixed = LockOptions::new().ttl(Duration::from_secs(4)).auto_extend(false);
    let ga = a.lock_with(&name, &fixed).await.expect("A locks");
    server.server.shift_clock(-30_000);
    assert_a_longer_lease_after_a_step_back(&a, &name, ga).await;
}
