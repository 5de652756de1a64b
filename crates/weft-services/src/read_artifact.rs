//! `read_artifact {id, offset?, length?}`: the model pages through a tool result that was
//! too large to show whole. Only the turn's own user's artifacts can be read.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{prompts, Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

use crate::assets::{AssetError, AssetStore};

/// Room kept in a page for its header line.
const HEADER_BYTES: usize = 160;

pub struct ReadArtifact {
    pub assets: Arc<AssetStore>,
}

#[async_trait]
impl Tool for ReadArtifact {
    fn name(&self) -> &str {
        prompts::READ_ARTIFACT
    }

    fn description(&self) -> &str {
        "Read part of a tool result that was too large to show whole, by its artifact id \
(named in the result's truncation marker). Pages are UTF-8 text; continue from the \
next offset the header gives."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The artifact id."},
                "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)."},
                "length": {"type": "integer", "minimum": 1, "description": "Bytes to read (default and maximum: one result's worth)."}
            },
            "required": ["id"]
        })
    }

    fn policy_class(&self) -> PolicyClass {
        PolicyClass::Safe
    }

    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let id = args.get("id").and_then(Value::as_str).unwrap_or_default();
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let page = ctx.result_max_bytes.saturating_sub(HEADER_BYTES).max(1) as u64;
        let length = args
            .get("length")
            .and_then(Value::as_u64)
            .unwrap_or(page)
            // Room for at least one whole character.
            .clamp(4, page.max(4));
        let asset = match self.assets.find(&ctx.user_id, id).await {
            Ok(asset) => asset,
            Err(AssetError::NotFound) => {
                return Err(ToolError::model(format!(
                    "error: no artifact `{}`",
                    weft_protocol::clip(id, 80)
                )))
            }
            Err(e) => return Err(ToolError::model(format!("error: {e}"))),
        };
        let size = u64::try_from(asset.size).unwrap_or(0);
        if offset >= size {
            return Ok(format!(
                "[artifact {id}: {size} bytes; offset {offset} is past the end]"
            ));
        }
        let bytes = self
            .assets
            .read(&asset, offset..offset.saturating_add(length))
            .await
            .map_err(|e| ToolError::model(format!("error: {e}")))?;
        let (start, text) = whole_chars(offset, &bytes);
        let end = start + text.len() as u64;
        let next = if end >= size {
            "end of artifact".to_owned()
        } else {
            format!("next offset {end}")
        };
        Ok(format!(
            "[artifact {id}: bytes {start}..{end} of {size}; {next}]\n{text}"
        ))
    }
}

/// The whole characters in `bytes` (read from `offset`): a character cut at the start is
/// skipped, one cut at the end left for the next page. Returns where the text starts.
fn whole_chars(offset: u64, bytes: &[u8]) -> (u64, String) {
    let skip = if offset == 0 {
        0
    } else {
        bytes
            .iter()
            .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
            .count()
    };
    let rest = &bytes[skip..];
    let text = match std::str::from_utf8(rest) {
        Ok(text) => text.to_owned(),
        Err(e) if e.error_len().is_none() => {
            String::from_utf8_lossy(&rest[..e.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(rest).into_owned(),
    };
    (offset + skip as u64, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_start_and_end_on_whole_characters() {
        let text = "aé漢b";
        let bytes = text.as_bytes();
        // From inside `é` (offset 2): its tail byte is skipped, `漢` is cut at the end.
        let (start, page) = whole_chars(2, &bytes[2..5]);
        assert_eq!((start, page.as_str()), (3, ""));
        let (start, page) = whole_chars(3, &bytes[3..7]);
        assert_eq!((start, page.as_str()), (3, "漢b"));
        let (start, page) = whole_chars(0, &bytes[0..2]);
        assert_eq!((start, page.as_str()), (0, "a"));
    }
}
