//! Weft's wire contract (PROTOCOL.md) as serde types; no I/O lives here.

pub mod agent_config;
pub mod command;
pub mod control;
pub mod event;
pub mod inbound;
pub mod metadata;
pub mod tree;
pub mod types;

pub use agent_config::{
    AgentConfig, AgentConfigError, ArgValidation, ToolErrorMode, ToolParallelism,
};
pub use command::{
    ChatMessageData, ClientCommand, CommandEnvelope, MediaGeneration, ResumeChatData,
    SetPermissionModeData, StopData,
};
pub use control::{ApprovalDecision, ClientTool, ControlFrame};
pub use event::{
    Amount, BudgetReason, ErrorCode, ServerEvent, ServerFrame, StoredMessage, ToolCallStatus,
};
pub use inbound::{decode_inbound, InboundError, InboundFrame};
pub use metadata::{ApprovalStatus, ToolResultMetadata, ToolResultStatus};
pub use tree::{preview, ExecutionTreeNode, ExecutionTreeSnapshot, PREVIEW_MAX_CHARS};
pub use types::{
    ChatContext, ContentPart, MessageContent, PermissionMode, PolicyClass, ToolCategory,
};
