//! Two consecutive record items of one level kept as one row: a tool round is a response and
//! its results, and stored as one row instead of two the database inserts and indexes half
//! as many rows per round. The pair is the store's own layout: made on the way in
//! ([`ItemRow::paired`]) and taken apart on the way out ([`unpack`]), so every reader of the
//! record sees items, numbered as they were written.

use serde_json::value::RawValue;

use crate::rows::ItemRow;

/// Joins a pair's two kinds in its row's `kind` (`assistant+tool_results`); no item's own
/// kind holds it.
const JOIN: char = '+';

impl ItemRow {
    /// `first` and `second` as one row, when `second` comes right after `first` at the same
    /// level of the same turn and neither is a pair already; `None` otherwise. The row takes
    /// `first`'s position (and `second`'s is the one after it) and replaces whatever row was
    /// written at that position before (a streaming draft of the response).
    pub fn paired(first: &ItemRow, second: &ItemRow) -> Option<ItemRow> {
        let follows = first.thread_id == second.thread_id
            && first.message_id == second.message_id
            && first.parent_id == second.parent_id
            && first.depth == second.depth
            && second.position == first.position + 1;
        let single = !first.kind.contains(JOIN) && !second.kind.contains(JOIN);
        (follows && single).then(|| ItemRow {
            thread_id: first.thread_id.clone(),
            message_id: first.message_id.clone(),
            position: first.position,
            kind: format!("{}{JOIN}{}", first.kind, second.kind),
            parent_id: first.parent_id.clone(),
            depth: first.depth,
            // Both bodies are JSON: the pair's is the array of the two, each kept as written
            // (in a string of its size: it waits for the writer).
            body: ["[", first.body.as_str(), ",", second.body.as_str(), "]"].concat(),
            created_at: first.created_at,
        })
    }
}

/// The items stored `rows` hold, in order: a pair's row gives back its two items.
pub(crate) fn unpack(rows: Vec<ItemRow>) -> Vec<ItemRow> {
    let pairs = rows.iter().filter(|r| r.kind.contains(JOIN)).count();
    if pairs == 0 {
        return rows;
    }
    let mut items = Vec::with_capacity(rows.len() + pairs);
    for row in rows {
        match split(&row) {
            Some((first, second)) => items.extend([first, second]),
            None => items.push(row),
        }
    }
    items
}

/// A pair's two items; `None` for a row that is one item (or a pair that cannot be read,
/// which readers then report as an unreadable item).
fn split(row: &ItemRow) -> Option<(ItemRow, ItemRow)> {
    let (first_kind, second_kind) = row.kind.split_once(JOIN)?;
    let bodies: Vec<&RawValue> = match serde_json::from_str(&row.body) {
        Ok(bodies) => bodies,
        Err(e) => {
            tracing::warn!(item = %row.id(), error = %e, "unreadable pair of record items");
            return None;
        }
    };
    let [first_body, second_body] = bodies.as_slice() else {
        tracing::warn!(item = %row.id(), parts = bodies.len(), "a pair of record items that is not two");
        return None;
    };
    let item = |position: i64, kind: &str, body: &RawValue| ItemRow {
        thread_id: row.thread_id.clone(),
        message_id: row.message_id.clone(),
        position,
        kind: kind.to_owned(),
        parent_id: row.parent_id.clone(),
        depth: row.depth,
        body: body.get().to_owned(),
        created_at: row.created_at,
    };
    Some((
        item(row.position, first_kind, first_body),
        item(row.position + 1, second_kind, second_body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(position: i64, kind: &str, body: &str, depth: i64) -> ItemRow {
        ItemRow {
            thread_id: "t".into(),
            message_id: "m".into(),
            position,
            kind: kind.into(),
            parent_id: (depth > 0).then(|| "call".to_owned()),
            depth,
            body: body.into(),
            created_at: 7,
        }
    }

    #[test]
    fn a_pair_unpacks_to_the_two_items_as_written() {
        let response = item(4, "assistant", r#"{"kind":"assistant","text":"a, [b]"}"#, 0);
        let results = item(
            5,
            "tool_results",
            r#"[{"kind":"tool_result","result":"x"},{"result":"]"}]"#,
            0,
        );
        let pair = ItemRow::paired(&response, &results).expect("adjacent items pair");
        assert_eq!(pair.position, 4);
        assert_eq!(pair.kind, "assistant+tool_results");
        let after = item(6, "assistant", r#"{"kind":"assistant","text":"done"}"#, 0);
        let items = unpack(vec![pair, after.clone()]);
        assert_eq!(items, vec![response, results, after]);
    }

    #[test]
    fn only_neighbours_of_one_level_pair() {
        let response = item(4, "assistant", "{}", 0);
        assert!(ItemRow::paired(&response, &item(6, "tool_results", "[]", 0)).is_none());
        assert!(ItemRow::paired(&response, &item(5, "tool_results", "[]", 1)).is_none());
        let pair = ItemRow::paired(&response, &item(5, "tool_results", "[]", 0)).unwrap();
        assert!(ItemRow::paired(&pair, &item(5, "tool_results", "[]", 0)).is_none());
    }

    #[test]
    fn an_unreadable_pair_stays_one_row() {
        let broken = item(1, "assistant+tool_results", "[{}]", 0);
        assert_eq!(unpack(vec![broken.clone()]), vec![broken]);
    }
}
