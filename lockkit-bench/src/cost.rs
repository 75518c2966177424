//! What a measured interval costs besides time: the bench process's CPU
//! ([`Rusage`]) and, on Redis and Redlock, the servers' command time
//! ([`RedisStats`]), both taken around exactly the intervals a row measures
//! ([`Meter`], [`Span`]) and summed over them ([`Cost`]).

use std::ops::AddAssign;
use std::time::Duration;

use crate::error::BenchError;
use crate::report::Row;

/// The CPU time (user + system) the whole bench process has used so far:
/// `getrusage(RUSAGE_SELF)`, every thread of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rusage {
    /// User time.
    pub user: Duration,
    /// System time.
    pub system: Duration,
}

impl Rusage {
    /// The process's CPU time now.
    pub fn now() -> Self {
        // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes the struct it is given; RUSAGE_SELF always exists.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        debug_assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) failed");
        let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
        Rusage {
            user: time(ru.ru_utime),
            system: time(ru.ru_stime),
        }
    }

    /// User + system time.
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }

    /// The CPU time used between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Rusage) -> Duration {
        self.cpu().saturating_sub(earlier.cpu())
    }
}

/// The Redis servers of a `redis://`, `rediss://` or `redlock://` URL (every
/// Redlock node), for the CPU time their main threads used.
///
/// [`snapshot`](Self::snapshot) is that time so far, summed over the nodes
/// (`used_cpu_user_main_thread` + `used_cpu_sys_main_thread` of `INFO
/// cpu`): what a single-threaded Redis runs out of, the commands and the
/// sockets' reads and writes alike. `INFO commandstats` would leave out the
/// socket work and, on Redis 7, count a script's inner commands twice (on
/// their own lines and in the script's). Other clients' work in the same
/// interval counts too (in w1 only one implementation runs at a time), and
/// so does the server's own timer work (~10 calls a second).
#[cfg(feature = "redis")]
pub struct RedisStats {
    nodes: Vec<redis::aio::MultiplexedConnection>,
}

#[cfg(feature = "redis")]
impl RedisStats {
    /// Connects to every node of `url`, with connections of its own; `None`
    /// for a URL that is not plain Redis or Redlock (cluster and sentinel
    /// URLs do not list the servers that run the commands).
    pub async fn connect(url: &str) -> Result<Option<Self>, BenchError> {
        let parsed = lockkit::raw::ConnectUrl::parse(url)?;
        if !matches!(parsed.scheme.as_str(), "redis" | "rediss" | "redlock") {
            return Ok(None);
        }
        let nodes = crate::floor::redis_nodes(&parsed).await?;
        Ok(Some(RedisStats { nodes }))
    }

    /// The servers' main-thread CPU time so far, µs (summed over the nodes).
    pub async fn snapshot(&self) -> Result<u64, BenchError> {
        let infos = futures_util::future::try_join_all(self.nodes.iter().map(|c| {
            let mut c = c.clone();
            async move { redis::cmd("INFO").arg("cpu").query_async::<String>(&mut c).await }
        }))
        .await?;
        Ok(infos
            .iter()
            .map(|info| crate::redis_info::main_thread_cpu_us(info))
            .sum())
    }
}

/// Takes the snapshots around the measured intervals on one backend: the
/// process's CPU always, the servers' command time where [`RedisStats`]
/// reaches them.
pub struct Meter {
    #[cfg(feature = "redis")]
    redis: Option<RedisStats>,
}

impl Meter {
    /// A meter for the backend at `url` (connects to its Redis servers,
    /// if it has any).
    pub async fn connect(url: &str) -> Result<Self, BenchError> {
        #[cfg(not(feature = "redis"))]
        let _ = url;
        Ok(Meter {
            #[cfg(feature = "redis")]
            redis: RedisStats::connect(url).await?,
        })
    }

    /// The servers' command time now, where measured.
    async fn server_us(&self) -> Result<Option<u64>, BenchError> {
        #[cfg(feature = "redis")]
        if let Some(stats) = &self.redis {
            return Ok(Some(stats.snapshot().await?));
        }
        Ok(None)
    }

    /// Starts a measured interval: the servers' snapshot first, then the
    /// CPU's, so the `INFO` round trip is not in the interval.
    pub async fn start(&self) -> Result<Span<'_>, BenchError> {
        let server_us = self.server_us().await?;
        Ok(Span {
            meter: self,
            server_us,
            cpu: Rusage::now(),
        })
    }
}

/// A measured interval under way (see [`Meter::start`]).
pub struct Span<'a> {
    meter: &'a Meter,
    server_us: Option<u64>,
    cpu: Rusage,
}

impl Span<'_> {
    /// Ends the interval (the CPU's snapshot first, then the servers'); what
    /// it cost.
    pub async fn stop(self) -> Result<Cost, BenchError> {
        let cpu = Rusage::now().since(&self.cpu);
        let after = self.meter.server_us().await?;
        Ok(Cost {
            cpu,
            server_us: after.zip(self.server_us).map(|(a, b)| a.saturating_sub(b)),
        })
    }
}

/// What measured intervals cost, summed (`+=`) over an implementation's
/// slices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// CPU time (user + system) of the whole bench process.
    pub cpu: Duration,
    /// The servers' command time, µs, where measured.
    pub server_us: Option<u64>,
}

impl AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        self.cpu += other.cpu;
        self.server_us = match (self.server_us, other.server_us) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

impl Cost {
    /// Sets `row`'s per-operation costs, for `ops` operations (none for none).
    pub fn fill(&self, row: &mut Row, ops: u64) {
        if ops == 0 {
            return;
        }
        let ops = ops as f64;
        row.client_cpu_us_per_op = Some(self.cpu.as_secs_f64() * 1e6 / ops);
        row.server_us_per_op = self.server_us.map(|us| us as f64 / ops);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Series, histogram};

    #[test]
    fn rusage_grows_with_work() {
        let before = Rusage::now();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = Rusage::now();
        assert!(after.since(&before) > Duration::ZERO, "{before:?} → {after:?}");
        assert_eq!(before.since(&after), Duration::ZERO);
    }

    #[test]
    fn costs_add_up_and_divide_by_ops() {
        let mut cost = Cost::default();
        cost += Cost {
            cpu: Duration::from_micros(300),
            server_us: Some(100),
        };
        cost += Cost {
            cpu: Duration::from_micros(100),
            server_us: Some(60),
        };
        let series = Series {
            imp: "floor",
            backend: "redis",
            url: "redis://h:1",
            workload: "w1",
            clients: 1,
        };
        let mut row = Row::new(series, 1.0, 8, &histogram());
        cost.fill(&mut row, 8);
        assert_eq!(row.client_cpu_us_per_op, Some(50.0));
        assert_eq!(row.server_us_per_op, Some(20.0));

        let mut row = Row::new(series, 1.0, 0, &histogram());
        Cost {
            cpu: Duration::from_micros(1),
            server_us: None,
        }
        .fill(&mut row, 0);
        assert_eq!((row.client_cpu_us_per_op, row.server_us_per_op), (None, None));
        let mut row = Row::new(series, 1.0, 2, &histogram());
        Cost {
            cpu: Duration::from_micros(10),
            server_us: None,
        }
        .fill(&mut row, 2);
        assert_eq!((row.client_cpu_us_per_op, row.server_us_per_op), (Some(5.0), None));
    }
}
