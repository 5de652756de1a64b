//! JSON text written at its exact size. sonic-rs escapes strings many bytes at a time and
//! writes what serde_json would, but it reserves room for the worst case of every string it
//! writes (six bytes a byte): text written straight into a `Vec` of its own regrows as it goes
//! and keeps that room for as long as the text lives. Here the text is written into a scratch
//! buffer that each thread keeps, and copied out once, at its length.

use std::cell::Cell;

use serde::Serialize;

/// Room a thread's scratch buffer starts with, and the most it keeps after a big text.
const SCRATCH_START: usize = 4 * 1024;
const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    static SCRATCH: Cell<Vec<u8>> = Cell::new(Vec::with_capacity(SCRATCH_START));
}

/// Writes `value` as compact JSON and hands the text to `out`, which copies what it keeps.
pub fn write<T, R>(value: &T, out: impl FnOnce(&str) -> R) -> sonic_rs::Result<R>
where
    T: Serialize + ?Sized,
{
    with_scratch(|scratch| {
        sonic_rs::to_writer(&mut *scratch, value)?;
        Ok(out(text_of(scratch)))
    })
}

/// Runs `f` with this thread's scratch buffer, empty. The buffer is out of its cell while `f`
/// runs: a value whose own serialization writes JSON text finds the cell empty and writes into
/// a buffer of its own (as does a thread that is ending).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut scratch = SCRATCH.try_with(Cell::take).unwrap_or_default();
    scratch.clear();
    let result = f(&mut scratch);
    if scratch.capacity() > SCRATCH_KEPT {
        scratch = Vec::with_capacity(SCRATCH_START);
    }
    let _ = SCRATCH.try_with(|cell| cell.set(scratch));
    result
}

/// `value` as compact JSON text, its capacity its length.
pub fn to_string<T>(value: &T) -> sonic_rs::Result<String>
where
    T: Serialize + ?Sized,
{
    write(value, str::to_owned)
}

/// What sonic-rs wrote, as text.
fn text_of(written: &[u8]) -> &str {
    // SAFETY: sonic-rs writes only valid UTF-8 (its own `to_string` relies on it too): JSON's
    // punctuation and numbers, and strings copied from `str`s or escaped in ASCII.
    unsafe { std::str::from_utf8_unchecked(written) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn text_is_what_serde_json_writes_and_no_larger() {
        let value = json!({"a": "x\"y\n\u{1}é😀".repeat(50), "b": [1, 2.5, null, true]});
        let text = to_string(&value).unwrap();
        assert_eq!(text, serde_json::to_string(&value).unwrap());
        assert_eq!(text.capacity(), text.len());
    }

    /// A value whose serialization writes JSON text itself finds the scratch buffer taken
    /// and is written all the same.
    #[test]
    fn a_value_that_writes_json_while_being_written_is_written() {
        struct Nested;
        impl Serialize for Nested {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&to_string(&json!({"inner": 1})).unwrap())
            }
        }
        let text = to_string(&[Nested]).unwrap();
        assert_eq!(text, r#"["{\"inner\":1}"]"#);
    }

    #[test]
    fn a_big_text_does_not_stay_in_the_scratch_buffer() {
        let big = "x".repeat(SCRATCH_KEPT * 2);
        assert_eq!(to_string(&big).unwrap().len(), big.len() + 2);
        assert!(SCRATCH.take().capacity() <= SCRATCH_KEPT);
    }
}
