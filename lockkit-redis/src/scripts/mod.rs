//! The Lua scripts: every change to a lock is one script call, so one
//! round trip and atomic. Semaphores and read-write locks have scripts of
//! their own (`kinds`), with the same arguments and replies where they
//! can; the mutex's are untouched by them. The scripts' sources are the files in `lua/`;
//! their arguments and replies are documented here, on each constant (one
//! file per family: acquire, release, extend, inspect). The keys they
//! work on are described in `layout`.
//!
//! # Attempts
//!
//! Every acquisition attempt carries an id (one per `lock` call); the hold
//! keeps one share per attempt (`ID:AT,` in a mutex's value, an `a:ID`
//! field of a semaphore's or read-write lock's hash), so the count is
//! their number. An attempt whose share is already there is a repeat —
//! lockkit's retry after a lost reply, or a command a client library sent
//! again — and changes nothing; a release takes its attempt's share out,
//! and a release whose share is gone changes nothing either. Every script is therefore safe to run twice.
//!
//! # Tokens
//!
//! A first acquisition takes `max(counter + 1, server time in µs)` from the
//! name's counter. Tokens therefore grow strictly per name, and even a server
//! that lost its counter (restart without persistence, failover to a lagging
//! replica) keeps issuing greater tokens — unless its clock is behind the
//! clock that issued the old ones. Tokens stay below 2^53 (until the year
//! 2255), so Lua's doubles hold them exactly.

mod acquire;
mod call;
mod extend;
mod inspect;
mod kinds;
mod leave;
mod release;
mod reply;

pub(crate) use acquire::{AcquireReply, Claim, Queueing, Share, Slot, acquire, acquire_replicated};
pub(crate) use call::{Publish, Replicas};
pub(crate) use extend::{ExtendItem, extend};
pub(crate) use inspect::{Stored, inspect, scan};
pub(crate) use kinds::{KindRelease, holders, nonce, release as release_kind, undo as undo_kind};
pub(crate) use leave::{Leaving, leave_line};
pub(crate) use release::{LineAfter, Released, UndoThen, force_release, release, undo};
pub(crate) use reply::millis;

#[cfg(test)]
mod tests {
    use super::acquire::parse_acquire;
    use super::extend::parse_extend;
    use super::inspect::parse_inspect;
    use super::release::parse_release;
    use super::*;
    use crate::turn::TurnOf;
    use redis::Value;

    #[test]
    fn replies() {
        let acquired = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"1700000000000123".to_vec()),
            Value::Int(2),
            Value::Int(999),
            Value::BulkString(b"r".to_vec()),
        ]);
        assert_eq!(
            parse_acquire(&acquired).unwrap(),
            AcquireReply::Acquired {
                token: 1_700_000_000_000_123,
                count: 2,
                pttl: 999,
                share: Share::Reentered,
                slot: None,
                told: None,
            }
        );
        let permit = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
            Value::Int(2),
            Value::BulkString(b"k00|a".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&permit).unwrap(),
            AcquireReply::Acquired { slot: Some(2), told: Some(m), .. } if m == b"k00|a"
        ));
        let told = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
            Value::BulkString(b"k00|a b".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&told).unwrap(),
            AcquireReply::Acquired { told: Some(m), .. } if m == b"k00|a b"
        ));
        let new = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&new).unwrap(),
            AcquireReply::Acquired { share: Share::New, .. }
        ));
        let busy = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(vec![]),
            Value::Int(0),
            Value::Int(5),
        ]);
        assert_eq!(
            parse_acquire(&busy).unwrap(),
            AcquireReply::Busy {
                pttl: 5,
                turn_of: None,
                last_write: None
            }
        );
        let turn = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(vec![]),
            Value::Int(0),
            Value::Int(-2),
            Value::BulkString(b"00c0ffee00c0ffee".to_vec()),
            Value::Int(3),
        ]);
        assert_eq!(
            parse_acquire(&turn).unwrap(),
            AcquireReply::Busy {
                pttl: -2,
                last_write: None,
                turn_of: Some(TurnOf {
                    head: "00c0ffee00c0ffee".to_owned(),
                    behind: 3
                })
            }
        );
        assert!(parse_acquire(&Value::Nil).is_err());
        let permits = Value::Array(vec![Value::Int(-1), Value::BulkString(b"3".to_vec())]);
        assert!(matches!(
            parse_acquire(&permits).unwrap(),
            AcquireReply::Conflict { reason } if reason.contains("3 permits")
        ));
        assert!(matches!(
            parse_acquire(&Value::Array(vec![Value::Int(-2)])).unwrap(),
            AcquireReply::Conflict { .. }
        ));
        assert_eq!(
            parse_acquire(&Value::Array(vec![Value::Int(2), Value::Int(1)])).unwrap(),
            AcquireReply::OtherSlot { free: 1 }
        );
        assert!(parse_acquire(&Value::Array(vec![Value::Int(2)])).is_err());
        assert_eq!(parse_release(&Value::Int(-1)).unwrap().remaining, None);
        assert_eq!(parse_release(&Value::Int(0)).unwrap().remaining, Some(0));
        assert_eq!(
            parse_release(&Value::BulkString(b"7|c1".to_vec())).unwrap(),
            Released {
                remaining: Some(0),
                published: Some(b"7|c1".to_vec())
            }
        );
        assert_eq!(
            parse_extend(&Value::Array(vec![Value::Int(-3), Value::Int(10)]), 2).unwrap(),
            vec![None, Some(10)]
        );
        assert!(parse_extend(&Value::Array(vec![]), 1).is_err());
        assert_eq!(parse_inspect(&Value::Array(vec![])).unwrap(), None);
    }
}
