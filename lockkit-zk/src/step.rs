//! The `step!` macro: one ZooKeeper step of an acquisition in one session,
//! where a session that ended means "start over" (and, with the
//! acquisition's clean-up, an error takes its node back first).

/// Unwraps a ZooKeeper result in a function returning `Result<Waited, _>`
/// (or `Result<Option<_>, _>`): a session that ended means "start over".
macro_rules! step {
    ($session:expr, $name:expr, $restart:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) if $crate::error::is_session_end(&e) => {
                $session.end(&e);
                return Ok($restart);
            }
            Err(e) => return Err($crate::error::zk("acquire", Some($name), e)),
        }
    };
    // With the acquisition's clean-up: an error takes its node (and any
    // share it may have made) back before it is returned. A session that
    // ended disarms it: the call carries on with the same attempt in a new
    // session, where the old session's node (which the server may keep a
    // while) is taken back as one of the attempt's earlier nodes — a
    // clean-up handed to the new session now could take the carried-on
    // attempt's new node for a leftover.
    ($session:expr, $name:expr, $restart:expr, $e:expr, $cleanup:ident) => {
        match $e {
            Ok(v) => v,
            Err(e) if $crate::error::is_session_end(&e) => {
                $session.end(&e);
                $cleanup.disarm();
                return Ok($restart);
            }
            Err(e) => {
                $cleanup.run().await;
                return Err($crate::error::zk("acquire", Some($name), e));
            }
        }
    };
}
pub(crate) use step;
