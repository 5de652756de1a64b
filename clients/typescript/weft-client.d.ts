// The API of weft-client.js. The frames' types (protocol.d.ts) are generated from the
// protocol's JSON Schema.
import type {
  ApprovalDecision,
  ApprovalOutcome,
  ClientFrame,
  ContentPart,
  ErrorCode,
  PermissionMode,
  ServerFrame,
  StoredMessage,
  ToolCategory,
  ToolResultMetadata,
} from "./protocol.js";

export type * from "./protocol.js";

/** A server frame of one `type`. */
export type FrameOf<T extends ServerFrame["type"]> = Extract<ServerFrame, { type: T }>;

export class WeftError extends Error {
  /** The server's `error.code`, or `connection_failed`, `connection_lost`, `connection_closed`, `superseded`. */
  readonly code: ErrorCode | "connection_failed" | "connection_lost" | "connection_closed" | "superseded";
  /** The `error` frame, when the server sent one. */
  readonly frame: FrameOf<"error"> | null;
}

/** MessagePack (or any binary) encoding of frames, e.g. `@msgpack/msgpack`'s `encode`/`decode`. */
export interface Codec {
  encode(frame: ClientFrame): Uint8Array;
  decode(bytes: Uint8Array): unknown;
}

export interface ClientOptions {
  /** The server's base URL (`http://127.0.0.1:8080`) or its websocket address (`ws://…/ws`). */
  url: string;
  apiKey?: string;
  /** A WebSocket constructor; default the global one (Node 20: `--experimental-websocket`). */
  WebSocket?: unknown;
  /** Binary frames (MessagePack); default JSON text frames. */
  codec?: Codec;
  /** Reconnect delays, doubling from `initialMs` up to `maxMs` (with jitter). */
  backoff?: { initialMs?: number; maxMs?: number };
}

/** Any `chat_message` field besides `content`, in camelCase (snake_case also accepted). */
export interface ChatOptions {
  threadId?: string;
  permissionMode?: PermissionMode;
  mode?: string;
  agent?: string;
  provider?: string;
  model?: string;
  memoryEnabled?: boolean;
  /** Regenerate or edit: the id of an earlier answer whose exchange (and everything after) this message replaces. */
  replaces?: string;
  chatContext?: { kind: "thread" } | { kind: "editor"; workflow_id?: string };
  [field: string]: unknown;
}

export type ConnectionState = "idle" | "connecting" | "open" | "reconnecting" | "closed";

export function websocketUrl(url: string, apiKey?: string): string;

export class WeftClient {
  constructor(options: ClientOptions);
  readonly url: string;
  readonly state: ConnectionState;
  /** Opens the connection; resolves once it is up, rejects if the first attempt fails. */
  connect(): Promise<void>;
  /** Closes for good: no reconnecting. */
  close(): void;
  /** Loses the connection as a network would: it reconnects and resumes every followed turn. */
  drop(): void;
  onFrame(listener: (frame: ServerFrame) => void): () => void;
  onState(listener: (state: ConnectionState) => void): () => void;
  /** Sends a raw frame (queued while disconnected); true when it went out at once. */
  send(frame: ClientFrame): boolean;
  /** Sends a chat message and follows its turn (a new chat gets a fresh thread id). */
  chat(content: string | ContentPart[], options?: ChatOptions): Turn;
  /** Follows a thread's running turn (or gets its last answer) from `lastSeq`. */
  resume(threadId: string, lastSeq?: number): Turn;
  respond(toolCallId: string, decision: ApprovalDecision, reason?: string): void;
  allow(toolCallId: string): void;
  allowForChat(toolCallId: string): void;
  deny(toolCallId: string, reason?: string): void;
  stop(threadId: string): void;
  setPermissionMode(threadId: string, permissionMode: PermissionMode): void;
  /** The highest `seq` seen per thread. */
  readonly lastSeq: Map<string, number>;
}

/** One turn: its frames as they come (each once, across reconnects), and its stored message. */
export class Turn implements AsyncIterable<ServerFrame> {
  readonly threadId: string;
  /** The stored assistant message; rejects with a WeftError when the turn could not run or be followed. */
  readonly message: Promise<StoredMessage>;
  /** The frames so far, folded into cards. */
  readonly view: TurnView;
  /** The answer's text so far. */
  readonly text: string;
  readonly finished: boolean;
  stop(): void;
  [Symbol.asyncIterator](): AsyncIterator<ServerFrame>;
}

export interface TextItem {
  kind: "text";
  text: string;
}

export interface ToolCard {
  kind: "tool";
  id: string;
  name: string;
  args: unknown;
  depth: number;
  parentId: string | null;
  status: "running" | "done" | "error";
  result: string | null;
  isError: boolean;
  metadata: ToolResultMetadata | null;
  approval: { category: ToolCategory; args: unknown; decision: ApprovalOutcome | null } | null;
  /** A subtask's own text and calls, in order. */
  items: Array<TextItem | ToolCard>;
}

/** A turn's frames folded into the nested cards a chat UI draws. */
export class TurnView {
  readonly messageId: string | null;
  /** The answer in the order it happened: a text block per round, and tool cards. */
  readonly items: Array<TextItem | ToolCard>;
  readonly cards: Map<string, ToolCard>;
  readonly plan: { status: string; content: string } | null;
  readonly budget: FrameOf<"budget_exceeded">[];
  readonly cost: FrameOf<"cost_summary"> | null;
  readonly error: { code: ErrorCode; message: string } | null;
  /** `running` until the stored message says how the turn ended. */
  readonly status: string;
  readonly text: string;
  readonly pendingApprovals: ToolCard[];
  apply(frame: ServerFrame): void;
}
