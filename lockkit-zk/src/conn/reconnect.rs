//! Waiting out a lost connection before a request goes out again.

use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, Error as ZkError, SessionState};

/// The first pause after a loss answered while the client still says it is
/// connected; doubled after each one, up to [`PAUSE_MAX`].
const PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries.
const PAUSE_MAX: Duration = Duration::from_millis(500);

/// Paces the tries of one request over connection losses.
///
/// A request sent while the client reconnects waits in the client for the
/// new connection, so trying again at once is usually right. But a client
/// whose connection task is gone (its runtime shut down under it) answers
/// every request at once with a connection loss, and a loop that tried
/// again at once never yielded: it kept a worker thread busy and the
/// runtime's shutdown waited for it forever. So a try waits for the
/// client's state to change (or a pause) first, and gives up with the loss
/// once losses went on for longer than the client itself keeps a session
/// without a connection (7/5 of the session timeout), or with the session's
/// end once the client says the session ended.
pub(crate) struct Reconnect<'a> {
    client: &'a Client,
    since: Option<Instant>,
    pause: Duration,
}

impl<'a> Reconnect<'a> {
    pub(crate) fn new(client: &'a Client) -> Self {
        Reconnect {
            client,
            since: None,
            pause: PAUSE,
        }
    }

    /// After the connection loss `lost`: Ok when the request may go out
    /// again, else the error to return.
    pub(crate) async fn wait(&mut self, lost: ZkError) -> Result<(), ZkError> {
        let since = *self.since.get_or_insert_with(Instant::now);
        let mut states = self.client.state_watcher();
        match states.state() {
            SessionState::Expired => return Err(ZkError::SessionExpired),
            SessionState::Closed => return Err(ZkError::ClientClosed),
            SessionState::AuthFailed => return Err(ZkError::AuthFailed),
            _ => {}
        }
        if since.elapsed() > self.client.session_timeout() * 7 / 5 {
            return Err(lost);
        }
        let pause = self.pause;
        self.pause = (pause * 2).min(PAUSE_MAX);
        tokio::select! {
            _ = states.changed() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        Ok(())
    }
}
