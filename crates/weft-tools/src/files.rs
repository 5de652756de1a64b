//! `read_file` and `write_file`, confined to the policy's workspace root.

use async_trait::async_trait;
use serde_json::{json, Value};
use weft_core::{Tool, ToolContext, ToolError};
use weft_protocol::{PolicyClass, ToolCategory};

use crate::workspace::resolve;

/// Files larger than this are read only up to it (the result cap trims further).
const READ_LIMIT_BYTES: u64 = 1 << 20;

fn root(ctx: &ToolContext) -> Result<&std::path::Path, ToolError> {
    ctx.workspace_root
        .as_deref()
        .ok_or_else(|| ToolError::model("no workspace is configured for this session"))
}

fn path_arg(args: &Value) -> Result<&str, ToolError> {
    args.get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::model("`path` is required"))
}

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "Read a text file from the workspace. `path` is relative to the workspace root."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the workspace root."}}, "required": ["path"]})
    }
    fn policy_class(&self) -> PolicyClass {
        PolicyClass::WorkspaceWrite
    }
    fn category(&self) -> ToolCategory {
        ToolCategory::Read
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let relative = path_arg(&args)?;
        let path = resolve(root(ctx)?, relative, false).map_err(|r| ToolError::Model(r.0))?;
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| ToolError::model(format!("cannot read {relative}: {e}")))?;
        let mut bytes = Vec::new();
        use tokio::io::AsyncReadExt;
        file.take(READ_LIMIT_BYTES)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| ToolError::model(format!("cannot read {relative}: {e}")))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "Write (create or replace) a text file in the workspace. `path` is relative to the workspace root."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace root."},
            "content": {"type": "string", "description": "The full new content of the file."}
        }, "required": ["path", "content"]})
    }
    fn policy_class(&self) -> PolicyClass {
        PolicyClass::WorkspaceWrite
    }
    fn category(&self) -> ToolCategory {
        ToolCategory::Write
    }
    fn exclusive_lock(&self) -> Option<&str> {
        Some("workspace_fs")
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let relative = path_arg(&args)?;
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::model("`content` is required"))?;
        let path = resolve(root(ctx)?, relative, true).map_err(|r| ToolError::Model(r.0))?;
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| ToolError::model(format!("cannot write {relative}: {e}")))?;
        Ok(format!("wrote {} bytes to {relative}", content.len()))
    }
}
