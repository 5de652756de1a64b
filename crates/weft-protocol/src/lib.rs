//! Weft's wire contract (PROTOCOL.md) as serde types; no I/O lives here.

pub mod agent_config;
mod agent_limits;
pub mod command;
pub mod control;
pub mod event;
pub mod graph;
pub mod inbound;
pub mod metadata;
pub mod record;
pub mod rest;
pub mod schema;
pub mod tree;
pub mod types;

pub use agent_config::{
    parse_model, AgentConfig, AgentConfigError, ArgValidation, BudgetAwareness, InjectedArgs,
    ToolAvailability, ToolErrorMode, ToolParallelism, DEFAULT_AGENT,
};
pub use command::{
    ChatMessageData, ClientCommand, CommandEnvelope, MediaGeneration, ResumeChatData,
    SetPermissionModeData, StopData,
};
pub use control::{ApprovalDecision, ApprovalOutcome, ClientTool, ControlFrame};
pub use event::{
    Amount, BudgetReason, ErrorCode, ServerEvent, ServerFrame, StoredMessage, ToolCallStatus,
};
pub use inbound::{
    check_identifiers_of, clip, decode_inbound, echo, is_identifier, is_user_name, InboundError,
    InboundFrame, ECHO_MAX_BYTES, IDENTIFIER_MAX_CHARS, IDENTIFIER_PATTERN,
};
pub use metadata::{ApprovalStatus, ToolResultMetadata, ToolResultStatus};
pub use record::{NodeProgress, RecordEntry, RecordItem, RecordedCall, INTERRUPTED_RESULT};
pub use tree::{preview, ExecutionTreeNode, ExecutionTreeSnapshot, PREVIEW_MAX_CHARS};
pub use types::{
    ChatContext, ContentPart, MessageContent, PermissionMode, PolicyClass, ToolCategory,
};
