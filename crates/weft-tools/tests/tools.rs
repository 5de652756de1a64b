//! The built-in tools called directly with a real workspace on disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft_core::{AgentMemory, EventSink, Tool, ToolContext, ToolError, TurnScope};
use weft_tools::files::{ReadFile, WriteFile};
use weft_tools::memory::{MemoryList, MemoryRead, MemoryWrite};
use weft_tools::todo::TodoWrite;

fn ctx(root: Option<&Path>) -> ToolContext {
    ToolContext {
        tool_call_id: "c".into(),
        parent_id: None,
        depth: 0,
        user_id: Arc::from("tester"),
        workspace_root: root.map(Arc::from),
        result_max_bytes: 50_000,
        read_max_bytes: 16 << 20,
        cancel: CancellationToken::new(),
        events: EventSink::detached(),
        memory: AgentMemory::new(),
        emit_progress: false,
        nested: None,
        scope: TurnScope::new(),
    }
}

#[tokio::test]
async fn write_then_read_inside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(Some(dir.path()));
    let out = WriteFile
        .call(json!({"path": "notes/a.md", "content": "héllo"}), &c)
        .await
        .unwrap();
    assert_eq!(out, "wrote 6 bytes to notes/a.md");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes/a.md")).unwrap(),
        "héllo"
    );
    assert_eq!(
        ReadFile
            .call(json!({"path": "notes/a.md"}), &c)
            .await
            .unwrap(),
        "héllo"
    );
}

#[tokio::test]
async fn escapes_are_refused_and_nothing_is_written_outside() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
    let c = ctx(Some(dir.path()));
    for path in ["../escape.txt", "/tmp/escape.txt", "out/escape.txt"] {
        let err = WriteFile
            .call(json!({"path": path, "content": "x"}), &c)
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::Model(_)), "{path}");
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(ReadFile
        .call(json!({"path": "/etc/hostname"}), &c)
        .await
        .is_err());
}

#[tokio::test]
async fn without_a_workspace_file_tools_refuse() {
    let err = ReadFile
        .call(json!({"path": "a"}), &ctx(None))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ToolError::model("no workspace is configured for this session")
    );
}

#[tokio::test]
async fn memory_tools_share_the_turn_memory() {
    let c = ctx(None);
    MemoryWrite
        .call(json!({"key": "k", "value": "v"}), &c)
        .await
        .unwrap();
    assert_eq!(MemoryRead.call(json!({"key": "k"}), &c).await.unwrap(), "v");
    assert_eq!(MemoryList.call(json!({}), &c).await.unwrap(), "[\"k\"]");
    assert!(MemoryRead
        .call(json!({"key": "missing"}), &c)
        .await
        .is_err());
}

#[tokio::test]
async fn todo_write_renders_and_remembers_the_list() {
    let c = ctx(None);
    let out = TodoWrite
        .call(json!({"todos": [{"content": "read", "status": "completed"}, {"content": "write", "status": "pending"}]}), &c)
        .await
        .unwrap();
    assert_eq!(out, "1/2 done\n[x] read\n[ ] write");
    assert!(c.memory.get("todos").unwrap().contains("write"));
}
