//! Postgres behind a transaction or statement pooler: each statement with
//! its arguments written in as typed literals, sent in the simple protocol
//! (one message, so one pooled transaction).
//!
//! sqlx's extended protocol sends a statement's `Parse` and its `Bind` in
//! two round trips, each ended by a `Sync`; a transaction pooler may run
//! the two on different server sessions, where the statement (named, or
//! the unnamed one) is missing or is another client's. The literals keep
//! the types binding gives (`int8`, `bytea`, `text`), so every statement
//! means what it means when bound. Bytes and any text that is not plain
//! are written in hex (`decode('…', 'hex')`), which no server setting
//! (`standard_conforming_strings`) reads differently.

use std::fmt::Write;

use crate::value::Arg;

/// `sql` with each `$n` replaced by the literal of `args[n - 1]`; an
/// error for a placeholder without an argument.
pub(super) fn inline(sql: &str, args: &[Arg<'_>]) -> Result<String, sqlx::Error> {
    let literals: Vec<String> = args.iter().map(literal).collect();
    substitute(sql, &literals)
}

/// As [`inline`], for the array statements (`(int8, bytea[], bytea[],
/// int8[])`) of `Db::pg_fetch_lists`.
pub(super) fn inline_lists(
    sql: &str,
    int: i64,
    lists: &(Vec<&[u8]>, Vec<&[u8]>, Vec<i64>),
) -> Result<String, sqlx::Error> {
    let bytes = |list: &[&[u8]]| array(list.iter().map(|b| literal(&Arg::Bytes(b))), "bytea");
    let ints = array(lists.2.iter().map(|i| literal(&Arg::Int(*i))), "int8");
    let literals = [literal(&Arg::Int(int)), bytes(&lists.0), bytes(&lists.1), ints];
    substitute(sql, &literals)
}

/// An argument as a typed literal, in parentheses.
fn literal(arg: &Arg<'_>) -> String {
    match *arg {
        Arg::Int(i) => format!("({i}::int8)"),
        Arg::Bytes(b) => format!("decode('{}', 'hex')", hex(b)),
        Arg::Text(None) => "(NULL::text)".to_owned(),
        Arg::Text(Some(t)) if t.bytes().all(plain) => format!("('{t}'::text)"),
        Arg::Text(Some(t)) => format!("convert_from(decode('{}', 'hex'), 'UTF8')", hex(t.as_bytes())),
    }
}

/// Bytes of text written as they are: no quote, backslash or control.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" _-.:/".contains(&b)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// An array literal of `elements` of `ty`.
fn array(elements: impl Iterator<Item = String>, ty: &str) -> String {
    let list: Vec<String> = elements.collect();
    format!("(ARRAY[{}]::{ty}[])", list.join(", "))
}

/// `sql` with each `$n` (outside nothing: lockkit's statements quote no
/// `$`) replaced by `literals[n - 1]`.
fn substitute(sql: &str, literals: &[String]) -> Result<String, sqlx::Error> {
    let mut out = String::with_capacity(sql.len() + literals.iter().map(String::len).sum::<usize>());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        let n: usize = after[..digits].parse().unwrap_or(0);
        let literal = n.checked_sub(1).and_then(|i| literals.get(i)).ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "statement placeholder ${n} has no argument ({} given)",
                literals.len()
            ))
        })?;
        out.push_str(literal);
        rest = &after[digits..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_keep_the_bound_types() {
        let args = [
            Arg::Bytes(b"a'\\"),
            Arg::Int(-5),
            Arg::Text(Some("0123abcd ef")),
            Arg::Text(Some("it's")),
            Arg::Text(None),
        ];
        let sql = inline("SELECT $1, $2::int8, strpos(x, $3), $4, $5, $10", &args[..]);
        assert!(sql.is_err(), "$10 has no argument");
        let sql = inline("SELECT $1, $2::int8, strpos(x, $3), $4, $5 WHERE y = $1", &args).unwrap();
        assert_eq!(
            sql,
            "SELECT decode('61275c', 'hex'), (-5::int8)::int8, strpos(x, ('0123abcd ef'::text)), \
             convert_from(decode('69742773', 'hex'), 'UTF8'), (NULL::text) WHERE y = decode('61275c', 'hex')"
        );
    }

    #[test]
    fn arrays() {
        let lists = (vec![&b"n"[..]], vec![&b""[..]], vec![7]);
        let sql = inline_lists("f($1, $2::bytea[], $3, $4)", 1, &lists).unwrap();
        assert_eq!(
            sql,
            "f((1::int8), (ARRAY[decode('6e', 'hex')]::bytea[])::bytea[], (ARRAY[decode('', 'hex')]::bytea[]), \
             (ARRAY[(7::int8)]::int8[]))"
        );
        let empty = inline_lists("f($2)", 1, &(vec![], vec![], vec![])).unwrap();
        assert_eq!(empty, "f((ARRAY[]::bytea[]))");
    }
}
