//! What names a kind's hold in its statements: the arguments that find a
//! hold or a name in `<table>_kinds` and `<table>_holds`, and the attempt
//! ids of a hold's shares (its `attempts`).

use lockkit_core::LockKind;
use lockkit_core::raw::{AcquireRequest, Hold};

use crate::sql::family;
use crate::value::{Arg, count};

/// The attempt ids of a hold's shares (its `attempts`, space-separated).
pub(super) fn shares(attempts: &str) -> impl Iterator<Item = &str> {
    attempts.split(' ').filter(|a| !a.is_empty())
}

/// The hold count: how many shares.
pub(super) fn share_count(attempts: &str) -> u32 {
    count(shares(attempts).count() as i64)
}

/// The arguments that find a hold: `(family, name, owner, token, writer)`.
pub(super) fn hold_args(hold: &Hold) -> [Arg<'_>; 5] {
    [
        Arg::Int(family(hold.kind)),
        Arg::Bytes(hold.name.as_bytes()),
        Arg::Bytes(hold.owner.as_bytes()),
        Arg::Int(hold.token as i64),
        Arg::Int(i64::from(hold.kind == LockKind::Write)),
    ]
}

/// `(family, name)` of a request.
pub(super) fn name_args<'a>(req: &AcquireRequest<'a>) -> [Arg<'a>; 2] {
    [Arg::Int(family(req.kind)), Arg::Bytes(req.name.as_bytes())]
}
