//! The scripts' replies as the parsers read them: one test per family of
//! replies, each with the shapes the Lua scripts return.

use redis::Value;

use super::acquire::parse_acquire;
use super::extend::parse_extend;
use super::inspect::parse_inspect;
use super::release::parse_release;
use super::*;
use crate::turn::TurnOf;

/// A bulk string reply.
fn bulk(s: &[u8]) -> Value {
    Value::BulkString(s.to_vec())
}

/// The head of a grant: `{1, token, count, pttl, share}`.
fn granted(token: &[u8], count: i64, share: &[u8]) -> Vec<Value> {
    vec![
        Value::Int(1),
        bulk(token),
        Value::Int(count),
        Value::Int(999),
        bulk(share),
    ]
}

#[test]
fn grants_carry_token_count_lease_and_share() {
    assert_eq!(
        parse_acquire(&Value::Array(granted(b"1700000000000123", 2, b"r"))).unwrap(),
        AcquireReply::Acquired {
            token: 1_700_000_000_000_123,
            count: 2,
            pttl: 999,
            share: Share::Reentered,
            slot: None,
            told: None,
        }
    );
    assert!(matches!(
        parse_acquire(&Value::Array(granted(b"7", 1, b"n"))).unwrap(),
        AcquireReply::Acquired { share: Share::New, .. }
    ));
}

#[test]
fn kind_grants_carry_slot_and_message() {
    let mut permit = granted(b"7", 1, b"n");
    permit.extend([Value::Int(2), bulk(b"k00|a")]);
    assert!(matches!(
        parse_acquire(&Value::Array(permit)).unwrap(),
        AcquireReply::Acquired { slot: Some(2), told: Some(m), .. } if m == b"k00|a"
    ));
    let mut told = granted(b"7", 1, b"n");
    told.push(bulk(b"k00|a b"));
    assert!(matches!(
        parse_acquire(&Value::Array(told)).unwrap(),
        AcquireReply::Acquired { told: Some(m), .. } if m == b"k00|a b"
    ));
}

#[test]
fn busy_replies_name_the_lease_or_the_turn() {
    let busy = Value::Array(vec![Value::Int(0), bulk(b""), Value::Int(0), Value::Int(5)]);
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
        bulk(b""),
        Value::Int(0),
        Value::Int(-2),
        bulk(b"00c0ffee00c0ffee"),
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
}

#[test]
fn refusals_and_other_slots() {
    let permits = Value::Array(vec![Value::Int(-1), bulk(b"3")]);
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
}

#[test]
fn release_extend_and_inspect_replies() {
    assert_eq!(parse_release(&Value::Int(-1)).unwrap().remaining, None);
    assert_eq!(parse_release(&Value::Int(0)).unwrap().remaining, Some(0));
    assert_eq!(
        parse_release(&bulk(b"7|c1")).unwrap(),
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
