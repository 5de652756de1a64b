//! Frame decoding: JSON text frames, or MessagePack binary frames with the same shapes (one
//! value, bounded in how many values it holds).

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Json,
    MsgPack,
}

/// Why a frame could not be decoded (answered with `invalid_json`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame is not valid JSON: {0}")]
    Json(String),
    #[error("frame is not valid MessagePack: {0}")]
    MsgPack(String),
}

pub fn decode_json(text: &str) -> Result<Value, DecodeError> {
    serde_json::from_str(text).map_err(|e| DecodeError::Json(e.to_string()))
}

/// Decode one MessagePack value that is the whole frame and holds at most
/// [`MAX_VALUES_PER_FRAME`] values (checked before anything is allocated: a megabyte of
/// one-byte `nil`s would otherwise become tens of megabytes of decoded values).
pub fn decode_msgpack(bytes: &[u8]) -> Result<Value, DecodeError> {
    shape_of_msgpack(bytes).map_err(DecodeError::MsgPack)?;
    rmp_serde::from_slice(bytes).map_err(|e| DecodeError::MsgPack(e.to_string()))
}

/// The most values (scalars, arrays, maps, each key and each element) one frame may hold.
pub const MAX_VALUES_PER_FRAME: usize = 65_536;

/// Walk the frame's markers without decoding: exactly one value, no bytes after it, and no
/// more than [`MAX_VALUES_PER_FRAME`] values in it.
fn shape_of_msgpack(bytes: &[u8]) -> Result<(), String> {
    use rmp::Marker;
    let mut rest = bytes;
    let mut pending: usize = 1;
    let mut seen: usize = 0;
    while pending > 0 {
        pending -= 1;
        seen += 1;
        if seen > MAX_VALUES_PER_FRAME {
            return Err(format!("more than {MAX_VALUES_PER_FRAME} values"));
        }
        let marker = rmp::decode::read_marker(&mut rest).map_err(|_| "it ends too soon")?;
        let (skip, children) = match marker {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => {
                (0, 0)
            }
            Marker::U8 | Marker::I8 => (1, 0),
            Marker::U16 | Marker::I16 => (2, 0),
            Marker::U32 | Marker::I32 | Marker::F32 => (4, 0),
            Marker::U64 | Marker::I64 | Marker::F64 => (8, 0),
            Marker::FixStr(n) => (usize::from(n), 0),
            Marker::Str8 | Marker::Bin8 => (length(&mut rest, 1)?, 0),
            Marker::Str16 | Marker::Bin16 => (length(&mut rest, 2)?, 0),
            Marker::Str32 | Marker::Bin32 => (length(&mut rest, 4)?, 0),
            Marker::FixArray(n) => (0, usize::from(n)),
            Marker::Array16 => (0, length(&mut rest, 2)?),
            Marker::Array32 => (0, length(&mut rest, 4)?),
            Marker::FixMap(n) => (0, 2 * usize::from(n)),
            Marker::Map16 => (0, 2 * length(&mut rest, 2)?),
            Marker::Map32 => (0, 2 * length(&mut rest, 4)?),
            Marker::FixExt1 => (2, 0),
            Marker::FixExt2 => (3, 0),
            Marker::FixExt4 => (5, 0),
            Marker::FixExt8 => (9, 0),
            Marker::FixExt16 => (17, 0),
            Marker::Ext8 => (length(&mut rest, 1)? + 1, 0),
            Marker::Ext16 => (length(&mut rest, 2)? + 1, 0),
            Marker::Ext32 => (length(&mut rest, 4)? + 1, 0),
            Marker::Reserved => return Err("it holds a reserved marker".into()),
        };
        rest = rest.get(skip..).ok_or("it ends too soon")?;
        pending += children;
        // Every value takes at least a byte: a count past what is left is a lie.
        if pending > rest.len() {
            return Err("it ends too soon".into());
        }
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes follow the value", rest.len()));
    }
    Ok(())
}

/// A big-endian length of `width` bytes.
fn length(rest: &mut &[u8], width: usize) -> Result<usize, String> {
    let (head, tail) = rest.split_at_checked(width).ok_or("it ends too soon")?;
    *rest = tail;
    Ok(head.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_one_value_with_nothing_after_it() {
        let frame =
            rmp_serde::to_vec_named(&serde_json::json!({"type": "ping", "n": [1, 2.5, "x"]}))
                .unwrap();
        assert!(decode_msgpack(&frame).is_ok());
        let mut trailing = frame.clone();
        trailing.push(0xc0);
        let e = decode_msgpack(&trailing).unwrap_err().to_string();
        assert!(e.contains("1 bytes follow"), "{e}");
        assert!(decode_msgpack(&frame[..frame.len() - 1]).is_err());
        assert!(decode_msgpack(&[]).is_err());
        assert!(decode_msgpack(&[0xc1]).is_err());
    }

    #[test]
    fn a_frame_of_too_many_values_is_refused_before_decoding() {
        // An array32 of nils: a megabyte of them would decode to tens of megabytes.
        let count = MAX_VALUES_PER_FRAME;
        let mut frame = vec![0xdd];
        frame.extend_from_slice(&(count as u32).to_be_bytes());
        frame.resize(5 + count, 0xc0);
        let e = decode_msgpack(&frame).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
        // A count that the bytes cannot hold.
        let lie = [0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0];
        assert!(decode_msgpack(&lie)
            .unwrap_err()
            .to_string()
            .contains("ends too soon"));
        // Just under the bound decodes.
        let mut fits = vec![0xdd];
        fits.extend_from_slice(&((count - 1) as u32).to_be_bytes());
        fits.resize(5 + count - 1, 0xc0);
        assert!(decode_msgpack(&fits).is_ok());
    }
}
