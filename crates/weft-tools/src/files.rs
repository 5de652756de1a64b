//! `read_file` and `write_file`, confined to the caller's workspace (see `workspace`); the
//! file work runs on a blocking thread.

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{Claim, Tool, ToolContext, ToolError};

use crate::workspace::{Refused, Workspace};

/// What the file tools claim: the user's workspace files (reads share it, a write has it
/// alone), so a read the model asks for after a write sees what was written.
pub const WORKSPACE_FILES: &str = "workspace_fs";

fn path_arg(args: &Value) -> Result<String, ToolError> {
    args.get("path")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::model("`path` is required"))
}

/// Run `work` on the caller's workspace, on a blocking thread.
async fn in_workspace<T: Send + 'static>(
    ctx: &ToolContext,
    work: impl FnOnce(Workspace) -> Result<T, Refused> + Send + 'static,
) -> Result<T, ToolError> {
    let root = ctx
        .workspace_root
        .clone()
        .ok_or_else(|| ToolError::model("no workspace is configured for this session"))?;
    tokio::task::spawn_blocking(move || Workspace::open(&root).and_then(work))
        .await
        .map_err(|e| ToolError::model(format!("the file operation failed: {e}")))?
        .map_err(|r| ToolError::Model(r.0))
}

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    weft_core::tool_meta! {
        name: "read_file",
        description: "Read a text file from the workspace. `path` is relative to the workspace root; \
    `offset` and `length` (bytes) read a part of a big file.",
        class: WorkspaceWrite,
        category: Read,
        parameters: json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "offset": {"type": "integer", "minimum": 0, "description": "The byte to start at (default 0)."},
            "length": {"type": "integer", "minimum": 1, "description": "How many bytes to read (default: to the end)."}
        }, "required": ["path"]}),
    }
    fn claim(&self) -> Option<Claim> {
        Some(Claim::read(WORKSPACE_FILES))
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let relative = path_arg(&args)?;
        let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
        let length = args.get("length").and_then(Value::as_u64);
        let max = ctx.read_max_bytes;
        // One byte past the bound tells a file that is too big from one that just fits.
        let wanted = length.map_or(max.saturating_add(1), |l| (l as usize).min(max));
        let read = in_workspace(ctx, move |ws| ws.read(&relative, offset, wanted)).await?;
        if length.is_none() && read.bytes.len() > max {
            return Err(ToolError::model(format!(
                "the file is {} bytes, over the {max} bytes read_file reads at once \
                 ([agent] read_file_max_bytes); read it in parts with `offset` and `length`",
                read.size
            )));
        }
        // The whole part: a result longer than the model sees at once is kept whole and
        // paged with read_artifact.
        Ok(String::from_utf8_lossy(&read.bytes).into_owned())
    }
}

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    weft_core::tool_meta! {
        name: "write_file",
        description: "Write (create or replace) a text file in the workspace. `path` is relative to the workspace root.",
        class: WorkspaceWrite,
        category: Write,
        parameters: json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "content": {"type": "string", "description": "The full new content of the file."}
        }, "required": ["path", "content"]}),
    }
    fn claim(&self) -> Option<Claim> {
        Some(Claim::write(WORKSPACE_FILES))
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let relative = path_arg(&args)?;
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::model("`content` is required"))?
            .to_owned();
        let size = content.len();
        let shown = relative.clone();
        in_workspace(ctx, move |ws| ws.write(&relative, content.as_bytes())).await?;
        Ok(format!("wrote {size} bytes to {shown}"))
    }
}
