// The Weft wire protocol's frames, generated from docs/schema/*.json by
// scripts/generate-types.mjs. Do not edit by hand.

/**
 * Any frame a client sends.
 */
export type ClientFrame = CommandEnvelope | ControlFrame;
/**
 * The envelope every command travels in; `request_id` is echoed on the reply or error.
 */
export type CommandEnvelope = {
  request_id?: string | null;
} & CommandEnvelope1;
export type CommandEnvelope1 =
  | {
      command: "chat_message";
      data: ChatMessageData;
    }
  | {
      command: "stop";
      data: StopData;
    }
  | {
      command: "set_permission_mode";
      data: SetPermissionModeData;
    }
  | {
      command: "resume_chat";
      data: ResumeChatData;
    };
/**
 * Where the chat happens; `editor` unlocks editor-mutating tools.
 */
export type ChatContext =
  | {
      kind: "thread";
    }
  | {
      kind: "editor";
      workflow_id?: string | null;
    };
export type ContentPart =
  | {
      text: string;
      type: "text";
    }
  | {
      image_url: string;
      type: "image_url";
    }
  | {
      audio_url: string;
      type: "audio_url";
    };
/**
 * Per-thread trust level deciding what a gated tool call does.
 */
export type PermissionMode = "plan" | "default" | "auto";
export type ControlFrame =
  | {
      decision: ApprovalDecision;
      /**
       * Why (a denial's reason reaches the model with the call's result).
       */
      reason?: string | null;
      tool_call_id: string;
      type: "tool_approval_response";
    }
  | {
      tools: ClientTool[];
      type: "client_tools_manifest";
    }
  | {
      /**
       * Why the call failed (`ok: false`).
       */
      error?: string | null;
      ok: boolean;
      result?: {
        [k: string]: unknown;
      };
      tool_call_id: string;
      type: "tool_result";
    }
  | {
      type: "ping";
    };
export type ApprovalDecision = "allow" | "allow_for_chat" | "deny";
/**
 * One outbound frame: an event plus the thread and per-thread sequence it belongs to.
 */
export type ServerFrame = ServerFrame1 & ServerFrame2;
export type ServerFrame1 =
  | {
      content: string;
      depth?: number;
      done?: boolean;
      parent_id?: string | null;
      type: "chunk";
    }
  | {
      content: string;
      depth?: number;
      parent_id?: string | null;
      type: "reasoning";
    }
  | {
      args?: unknown;
      depth?: number;
      is_error?: boolean | null;
      metadata?: ToolResultMetadata | null;
      name: string;
      parent_id?: string | null;
      result?: string | null;
      status: ToolCallStatus;
      tool_call_id: string;
      type: "tool_call_update";
    }
  | {
      args: unknown;
      category: ToolCategory;
      depth?: number;
      /**
       * Schema-only arguments the model sent with the call (never passed to the tool).
       */
      injected_args?: {
        [k: string]: unknown;
      };
      name: string;
      parent_id?: string | null;
      tool_call_id: string;
      type: "tool_approval_request";
    }
  | {
      decision: ApprovalOutcome;
      tool_call_id: string;
      type: "tool_approval_resolved";
    }
  | {
      depth?: number;
      /**
       * Whether the whole turn ends; depth and sub-level iteration limits only fail a subtask.
       */
      ends_turn?: boolean;
      limit: Amount;
      observed: Amount;
      parent_id?: string | null;
      reason: BudgetReason;
      type: "budget_exceeded";
    }
  | {
      cost_usd: number;
      input_tokens: number;
      llm_calls: number;
      output_tokens: number;
      tool_calls: number;
      type: "cost_summary";
    }
  | {
      message: StoredMessage;
      type: "message";
    }
  | {
      args: unknown;
      depth: number;
      name: string;
      parent_id?: string | null;
      tool_call_id: string;
      type: "tool_call";
    }
  | {
      content: string;
      parent_id?: string | null;
      status: string;
      type: "planning_update";
    }
  | {
      depth?: number;
      message?: string | null;
      parent_id?: string | null;
      progress: Amount;
      tool_call_id: string;
      total?: Amount | null;
      type: "mcp_progress";
    }
  | {
      depth?: number;
      error?: string | null;
      job_id: string;
      parent_id?: string | null;
      /**
       * `running`, `completed`, `failed`, `cancelled`.
       */
      status: string;
      type: "job_update";
      workflow_id: string;
    }
  | {
      depth?: number;
      error?: string | null;
      job_id: string;
      node_id: string;
      node_type: string;
      parent_id?: string | null;
      result_preview?: string | null;
      status: string;
      type: "node_update";
    }
  | {
      message_id: string;
      mode: string;
      permission_mode: PermissionMode;
      type: "turn_started";
    }
  | {
      content: string;
      message_id: string;
      mode: string;
      permission_mode: PermissionMode;
      type: "turn_resumed";
    }
  | {
      code: ErrorCode;
      message: string;
      request_id?: string | null;
      type: "error";
    }
  | {
      type: "pong";
    };
export type ApprovalStatus = ("not_required" | "approved" | "rejected" | "timed_out") | "expired";
export type ToolResultStatus = "success" | "error" | "rejected" | "timed_out";
export type ToolCallStatus = "start" | "end";
/**
 * What a tool call does to the world, deciding approval per mode.
 */
export type ToolCategory = "read" | "write" | "execute" | "external";
/**
 * How an approval request ended (`tool_approval_resolved.decision`): the user's decision,
 * or that it timed out or was cancelled with its turn.
 */
export type ApprovalOutcome = "allow" | "allow_for_chat" | "deny" | "timed_out" | "cancelled";
export type Amount = number;
export type BudgetReason =
  | ("subtasks" | "llm_calls" | "tool_calls" | "wall_clock" | "tokens" | "bytes" | "cost" | "depth" | "iterations")
  | "context";
/**
 * A user message body: plain text or a list of parts.
 */
export type MessageContent = string | ContentPart[];
/**
 * Stable machine words for `error.code`.
 */
export type ErrorCode =
  | "invalid_json"
  | "unknown_command"
  | "invalid_field"
  | "unauthorized"
  | "forbidden"
  | "thread_not_found"
  | "turn_in_progress"
  | "unknown_mode"
  | "unsupported_route"
  | "provider_error"
  | "rate_limited"
  | "too_large"
  | "invalid_graph"
  | "workflow_not_found"
  | "agent_not_found"
  | "asset_not_found"
  | "message_not_found"
  | "collection_not_found"
  | "collection_exists"
  | "document_rejected"
  | "workflows_disabled"
  | "internal";

export interface Frames {
  ClientFrame?: ClientFrame;
  ServerFrame?: ServerFrame;
}
export interface ChatMessageData {
  /**
   * The agent for this turn (the thread remembers it); absent: the thread's, else the
   * server's default.
   */
  agent?: string | null;
  /**
   * Deprecated: accepted and ignored.
   */
  agent_mode?: boolean | null;
  chat_context?: ChatContext | null;
  /**
   * Deprecated: accepted and ignored.
   */
  collections?: string[] | null;
  /**
   * A user message body: plain text or a list of parts.
   */
  content?: string | ContentPart[];
  media_generation?: MediaGeneration | null;
  memory_enabled?: boolean | null;
  /**
   * Execution mode (`classic`, `code`, …); absent means `classic`.
   */
  mode?: string | null;
  model?: string | null;
  /**
   * Route 1: the workflow's parameters (absent: the message text is the parameter `input`).
   */
  params?: {
    [k: string]: unknown;
  } | null;
  permission_mode?: PermissionMode | null;
  provider?: string | null;
  /**
   * An earlier answer of this thread (an assistant message's id) that this message
   * replaces: the exchange it answered (the user message before it, the answer, and
   * everything after) is dropped in the same write that starts this turn, and this message
   * and its answer take their place. Regenerate sends the same content again; edit sends
   * new content. A refused message drops nothing.
   */
  replaces?: string | null;
  role?: string;
  thread_id?: string | null;
  /**
   * Deprecated: accepted and ignored; the server composes the toolbelt.
   */
  tools?: string[] | null;
  workflow_id?: string | null;
  workflow_target?: string | null;
}
export interface MediaGeneration {
  mode: string;
  [k: string]: unknown;
}
export interface StopData {
  thread_id: string;
}
export interface SetPermissionModeData {
  permission_mode: PermissionMode;
  thread_id: string;
}
export interface ResumeChatData {
  last_seq?: number;
  thread_id: string;
}
/**
 * A tool the client runs itself (`ui_*`), advertised by the client.
 */
export interface ClientTool {
  /**
   * What a call does, for the gate (default `write`: it asks in Default mode).
   */
  category?: "read" | "write" | "execute" | "external";
  description?: string;
  name: string;
  parameters?: {
    [k: string]: unknown;
  };
}
export interface ToolResultMetadata {
  approval_id?: string | null;
  approval_status: ApprovalStatus;
  /**
   * Unix seconds.
   */
  completed_at: number;
  execution_time_ms: number;
  injected_args?: {
    [k: string]: unknown;
  };
  offloaded_artifact_id?: string | null;
  /**
   * Unix seconds.
   */
  started_at: number;
  status: ToolResultStatus;
}
/**
 * A persisted message as clients see it.
 */
export interface StoredMessage {
  content: MessageContent;
  cost_usd?: number | null;
  created_at: string;
  execution_tree?: ExecutionTreeSnapshot | null;
  id: string;
  input_tokens?: number | null;
  /**
   * Assistant messages: how the turn ran (`agent`, `plan`).
   */
  metadata?: {
    [k: string]: unknown;
  };
  output_tokens?: number | null;
  permission_mode?: PermissionMode | null;
  role: string;
  /**
   * Assistant messages: `running`, `completed`, `budget_exceeded`, `cancelled`,
   * `provider_error`, `interrupted`, …
   */
  status?: string | null;
}
export interface ExecutionTreeSnapshot {
  nodes: ExecutionTreeNode[];
  version: number;
}
export interface ExecutionTreeNode {
  args_preview?: string | null;
  duration_ms: number;
  /**
   * The tool call id.
   */
  id: string;
  is_error?: boolean | null;
  name: string;
  parent_id?: string | null;
  result_preview?: string | null;
  title?: string | null;
}
export interface ServerFrame2 {
  seq?: number | null;
  /**
   * Shared by every frame of the thread.
   */
  thread_id?: string | null;
}
