//! Toolbelt composition: registered ∩ allowed by policy ∩ unlocked by context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use support::tools::TestTool;
use weft_core::{compose_toolbelt, RunSubtaskTool, Tool, ToolPolicy};
use weft_protocol::{ChatContext, PolicyClass};

fn tool(name: &'static str, class: PolicyClass) -> Arc<dyn Tool> {
    let mut t = TestTool::new(name);
    t.class = class;
    Arc::new(t)
}

fn registered() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(RunSubtaskTool),
        tool("memory_read", PolicyClass::Knowledge),
        tool("web_fetch", PolicyClass::Network),
        tool("write_file", PolicyClass::WorkspaceWrite),
        tool("ui_add_node", PolicyClass::EditorMutate),
        tool("read_secret", PolicyClass::Secrets),
        tool("clock", PolicyClass::Safe),
    ]
}

#[test]
fn thread_context_excludes_editor_and_secret_tools() {
    let ctx = ChatContext::Thread;
    let belt = compose_toolbelt(&registered(), &ToolPolicy::for_context(&ctx, None), &ctx);
    assert_eq!(
        belt.names(),
        vec![
            "run_subtask",
            "memory_read",
            "web_fetch",
            "write_file",
            "clock"
        ]
    );
}

#[test]
fn editor_context_unlocks_editor_tools_but_not_secrets() {
    let ctx = ChatContext::Editor {
        workflow_id: Some("wf1".into()),
    };
    let belt = compose_toolbelt(&registered(), &ToolPolicy::for_context(&ctx, None), &ctx);
    assert!(belt.contains("ui_add_node"));
    assert!(!belt.contains("read_secret"));
}

#[test]
fn editor_tools_need_the_editor_context_even_when_the_policy_allows_them() {
    let mut policy = ToolPolicy::for_context(&ChatContext::Thread, None);
    policy.classes.insert(PolicyClass::EditorMutate);
    let belt = compose_toolbelt(&registered(), &policy, &ChatContext::Thread);
    assert!(!belt.contains("ui_add_node"));
}

#[test]
fn secrets_only_by_opt_in() {
    let mut policy = ToolPolicy::for_context(&ChatContext::Thread, None);
    policy.classes.insert(PolicyClass::Secrets);
    let belt = compose_toolbelt(&registered(), &policy, &ChatContext::Thread);
    assert!(belt.contains("read_secret"));
}
