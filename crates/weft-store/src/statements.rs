//! The writer's multi-row statement texts, each built once per shape and kept: a batch's
//! 256-row insert of record rows numbers 2,048 parameters, and building that text for every
//! statement cost the writer about as much as binding the rows.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::Backend;

/// A multi-row INSERT: `head VALUES (…), (…) tail`.
pub(crate) struct InsertSql {
    pub(crate) head: &'static str,
    pub(crate) columns: usize,
    pub(crate) tail: &'static str,
}

/// What a text is kept under: what it is for (an insert's head and tail, or another
/// statement's name), the backend, and the two counts that shape it.
pub(crate) type Shape = (&'static str, &'static str, Backend, usize, usize);

static TEXTS: LazyLock<Mutex<HashMap<Shape, Arc<str>>>> = LazyLock::new(Mutex::default);

/// The text kept for `shape`, built by `build` the first time it is asked for. Shapes are
/// few (a handful of tables × nine chunk sizes, fenced rounds × their turn counts), so the
/// map stays small.
pub(crate) fn kept(shape: Shape, build: impl FnOnce() -> String) -> Arc<str> {
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    texts
        .entry(shape)
        .or_insert_with(|| Arc::from(build()))
        .clone()
}

/// `sql`'s statement for `rows` rows.
pub(crate) fn insert_text(backend: Backend, sql: &InsertSql, rows: usize) -> Arc<str> {
    kept((sql.head, sql.tail, backend, rows, 0), || {
        format!(
            "{} VALUES {}{}",
            sql.head,
            placeholders_after(backend, 0, rows, sql.columns),
            sql.tail
        )
    })
}

/// Most ids one of the writer's `IN (…)` lists carries.
pub(crate) const LIST_MAX: usize = 64;

/// `ids` (1 to [`LIST_MAX`] of them) as an `IN (…)` list's values, padded to the next power of
/// two with the last id again (which matches nothing more): a list of any length is one of
/// seven statement texts, each prepared once and kept in the connection's statement cache.
/// One text per length (64 of each such statement) pushed one another out of that cache, and
/// most commits prepared their statements again.
pub(crate) fn padded<'a>(ids: &[&'a str]) -> Vec<&'a str> {
    let mut list = ids.to_vec();
    if let Some(&last) = ids.last() {
        list.resize(ids.len().next_power_of_two(), last);
    }
    list
}

/// `$from, $from+1, …`: `n` numbered parameters, for an `IN (…)` list.
pub(crate) fn numbered(from: usize, n: usize) -> String {
    let list: Vec<String> = (from..from + n).map(|i| format!("${i}")).collect();
    list.join(", ")
}

/// `($1, $2), ($3, $4)` for PostgreSQL, numbered after `before` parameters; `(?, ?), (?, ?)`
/// for SQLite, whose bind-parameter lookup by name is linear per parameter (quadratic for a
/// big multi-row insert).
pub(crate) fn placeholders_after(
    backend: Backend,
    before: usize,
    rows: usize,
    columns: usize,
) -> String {
    let mut out = String::with_capacity(rows * columns * 6);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 1..=columns {
            if c > 1 {
                out.push_str(", ");
            }
            match backend {
                Backend::Postgres => {
                    out.push('$');
                    out.push_str(&(before + r * columns + c).to_string());
                }
                Backend::Sqlite => out.push('?'),
            }
        }
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAIRS: InsertSql = InsertSql {
        head: "INSERT INTO pairs (a, b)",
        columns: 2,
        tail: " ON CONFLICT DO NOTHING",
    };

    #[test]
    fn an_insert_is_numbered_per_backend_and_kept() {
        assert_eq!(
            &*insert_text(Backend::Postgres, &PAIRS, 2),
            "INSERT INTO pairs (a, b) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING"
        );
        assert_eq!(
            &*insert_text(Backend::Sqlite, &PAIRS, 2),
            "INSERT INTO pairs (a, b) VALUES (?, ?), (?, ?) ON CONFLICT DO NOTHING"
        );
        let first = insert_text(Backend::Postgres, &PAIRS, 3);
        assert!(Arc::ptr_eq(
            &first,
            &insert_text(Backend::Postgres, &PAIRS, 3)
        ));
        assert!(first.ends_with("($5, $6) ON CONFLICT DO NOTHING"));
        // The same head with another tail is another statement.
        let plain = InsertSql {
            head: PAIRS.head,
            columns: 2,
            tail: "",
        };
        assert_eq!(
            &*insert_text(Backend::Postgres, &plain, 1),
            "INSERT INTO pairs (a, b) VALUES ($1, $2)"
        );
    }

    #[test]
    fn a_list_is_padded_to_a_power_of_two_with_its_last_id() {
        assert_eq!(padded(&["a"]), ["a"]);
        assert_eq!(padded(&["a", "b", "c"]), ["a", "b", "c", "c"]);
        let five = ["a", "b", "c", "d", "e"];
        assert_eq!(padded(&five), ["a", "b", "c", "d", "e", "e", "e", "e"]);
        let full = ["x"; LIST_MAX];
        assert_eq!(padded(&full).len(), LIST_MAX);
        assert!(padded(&[]).is_empty());
        assert_eq!(numbered(3, 2), "$3, $4");
    }

    #[test]
    fn placeholders_after_others_start_past_them() {
        assert_eq!(placeholders_after(Backend::Postgres, 3, 1, 2), "($4, $5)");
    }
}
