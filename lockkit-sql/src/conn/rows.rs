//! A statement's arguments bound and its rows decoded, once for every
//! driver: sqlx has a type per database, and these functions take any
//! whose driver encodes and decodes lockkit's few value types.

use sqlx::database::Database;
use sqlx::query::Query;
use sqlx::{ColumnIndex, Decode, Encode, Row, Type};

use crate::value::{Arg, Col, Val};

/// Binds `args` to `query`, in order.
pub(super) fn bind_all<'q, DB>(query: Query<'q, DB, DB::Arguments>, args: &[Arg<'_>]) -> Query<'q, DB, DB::Arguments>
where
    DB: Database,
    for<'a> &'a [u8]: Encode<'a, DB> + Type<DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> Option<&'a str>: Encode<'a, DB> + Type<DB>,
{
    args.iter().fold(query, |query, arg| match *arg {
        Arg::Bytes(b) => query.bind(b),
        Arg::Int(i) => query.bind(i),
        Arg::Text(t) => query.bind(t),
    })
}

/// Decodes `row` as `cols` says (a NULL integer as 0).
pub(super) fn decode_row<R>(row: &R, cols: &[Col]) -> Result<Vec<Val>, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    cols.iter()
        .enumerate()
        .map(|(i, col)| {
            Ok(match col {
                Col::Int => Val::Int(row.try_get::<Option<i64>, _>(i)?.unwrap_or(0)),
                Col::Bytes => Val::Bytes(row.try_get::<Vec<u8>, _>(i)?),
                Col::Text => Val::Text(row.try_get::<String, _>(i)?),
            })
        })
        .collect()
}

/// Decodes every row of `rows` as `cols` says.
pub(super) fn decode_rows<R>(rows: &[R], cols: &[Col]) -> Result<Vec<Vec<Val>>, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    rows.iter().map(|row| decode_row(row, cols)).collect()
}
