//! JSON text written at its exact size. sonic-rs escapes strings many bytes at a time and
//! writes what serde_json would, but it reserves room for the worst case of every string it
//! writes (six bytes a byte): text written straight into a `Vec` of its own regrows as it goes
//! and keeps that room for as long as the text lives. Here the text is written into a scratch
//! buffer that each thread keeps, and copied out once, at its length. [`JsonWriter`] lets a
//! caller that knows its shape write the text part by part (constant keys in one copy) rather
//! than through serde's call a field.

use std::cell::Cell;

use serde::Serialize;
use sonic_rs::format::{CompactFormatter, Formatter};
pub use sonic_rs::Error;

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
    write_with(|json| json.value(value), out)
}

/// Writes the JSON text `fill` makes, part by part, and hands it to `out`, which copies what
/// it keeps.
pub fn write_with<R>(
    fill: impl FnOnce(&mut JsonWriter<'_>) -> sonic_rs::Result<()>,
    out: impl FnOnce(&str) -> R,
) -> sonic_rs::Result<R> {
    with_scratch(|scratch| {
        fill(&mut JsonWriter(scratch))?;
        Ok(out(text_of(scratch)))
    })
}

/// JSON text being written, a part at a time: each part is valid UTF-8 (text, escaped strings,
/// numbers), so the whole is too. Which parts make valid JSON is the caller's business.
pub struct JsonWriter<'a>(&'a mut Vec<u8>);

impl JsonWriter<'_> {
    /// Text as it is: punctuation and keys (`,"name":`).
    #[inline]
    pub fn raw(&mut self, text: &str) {
        self.0.extend_from_slice(text.as_bytes());
    }

    /// A string, quoted and escaped as serde_json would.
    #[inline]
    pub fn string(&mut self, value: &str) {
        // Writing into a `Vec` cannot fail.
        let _ = CompactFormatter.write_string_fast(&mut *self.0, value, true);
    }

    /// A string, or `null`.
    #[inline]
    pub fn string_or_null(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.string(value),
            None => self.raw("null"),
        }
    }

    #[inline]
    pub fn uint(&mut self, value: u64) {
        let _ = CompactFormatter.write_u64(&mut *self.0, value);
    }

    #[inline]
    pub fn bool(&mut self, value: bool) {
        self.raw(if value { "true" } else { "false" });
    }

    /// A number as serde_json writes an `f64` (`null` when it is not finite).
    #[inline]
    pub fn float(&mut self, value: f64) {
        if value.is_finite() {
            let _ = CompactFormatter.write_f64(&mut *self.0, value);
        } else {
            self.raw("null");
        }
    }

    /// Any value, through serde.
    #[inline]
    pub fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> sonic_rs::Result<()> {
        sonic_rs::to_writer(&mut *self.0, value)
    }

    /// The members of `value`, which serde writes as an object, as more members of an object
    /// already opened here (with a member or more): a comma, its members and the closing
    /// brace. An error, for a value that is not an object.
    pub fn members_of<T: Serialize + ?Sized>(&mut self, value: &T) -> sonic_rs::Result<()> {
        let start = self.0.len();
        self.value(value)?;
        match self.0.get(start..start + 2) {
            Some(b"{}") => {
                self.0.truncate(start);
                self.raw("}");
            }
            Some([b'{', _]) => self.0[start] = b',',
            _ => {
                self.0.truncate(start);
                return Err(serde::ser::Error::custom("not an object"));
            }
        }
        Ok(())
    }
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

/// What sonic-rs or a [`JsonWriter`] wrote, as text.
fn text_of(written: &[u8]) -> &str {
    // SAFETY: sonic-rs writes only valid UTF-8 (its own `to_string` relies on it too): JSON's
    // punctuation and numbers, and strings copied from `str`s or escaped in ASCII. A
    // `JsonWriter` writes only `str`s and what sonic-rs writes, whole; `members_of` only
    // swaps one ASCII byte for another and cuts where a write began.
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
    fn an_object_continues_another_and_anything_else_is_refused() {
        let text = write_with(
            |json| {
                json.raw("{\"a\":1");
                json.members_of(&json!({"b": [2], "c": "é"}))?;
                Ok(())
            },
            str::to_owned,
        );
        assert_eq!(text.unwrap(), r#"{"a":1,"b":[2],"c":"é"}"#);
        let text = write_with(
            |json| {
                json.raw("{\"a\":1");
                json.members_of(&json!({}))
            },
            str::to_owned,
        );
        assert_eq!(text.unwrap(), r#"{"a":1}"#);
        for not_an_object in [json!([1]), json!("s"), json!(null)] {
            let refused = write_with(|json| json.members_of(&not_an_object), str::to_owned);
            assert!(refused.is_err(), "{not_an_object} is not an object");
        }
    }

    #[test]
    fn a_big_text_does_not_stay_in_the_scratch_buffer() {
        let big = "x".repeat(SCRATCH_KEPT * 2);
        assert_eq!(to_string(&big).unwrap().len(), big.len() + 2);
        assert!(SCRATCH.take().capacity() <= SCRATCH_KEPT);
    }
}
