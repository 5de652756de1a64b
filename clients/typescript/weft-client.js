// @weft/client: Weft's websocket protocol (docs/PROTOCOL.md) as a small, dependency-free ES
// module for browsers and Node ≥ 20: turns as async iterators of typed frames, approvals,
// stop and permission modes, and reconnecting with `resume_chat` from the last `seq` seen so a
// dropped socket, a restarted server or a replica going away loses nothing.
//
// Types: weft-client.d.ts (the API) and protocol.d.ts (the frames, generated from the
// protocol's JSON Schema).

/** A refusal from the server (`error` frame) or a turn the client could not follow. */
export class WeftError extends Error {
  constructor(code, message, frame = null) {
    super(message);
    this.name = "WeftError";
    this.code = code;
    this.frame = frame;
  }
}

/** Close codes after which reconnecting cannot help: the key was revoked. */
const FINAL_CLOSE_CODES = new Set([4001]);
/** The close code `drop()` uses: a socket lost on purpose, reconnected like any other. */
const DROP_CODE = 4000;

/** The websocket address for `url`: a server's base URL (`http://host:8080`) or its `/ws`. */
export function websocketUrl(url, apiKey) {
  const address = new URL(url);
  if (address.protocol === "http:") address.protocol = "ws:";
  if (address.protocol === "https:") address.protocol = "wss:";
  if (!address.pathname.replace(/\/+$/, "").endsWith("/ws")) {
    address.pathname = `${address.pathname.replace(/\/+$/, "")}/ws`;
  }
  if (apiKey) address.searchParams.set("api_key", apiKey);
  return address.toString();
}

/** A thread id for a new chat (the server creates the thread under the id it is given). */
function newThreadId() {
  return globalThis.crypto.randomUUID();
}

export class WeftClient {
  /**
   * @param {object} options `url` (base or `/ws` address), `apiKey`, `WebSocket` (a
   *   constructor, default the global one), `codec` ({encode, decode} for MessagePack binary
   *   frames; default JSON text), `backoff` ({initialMs, maxMs}).
   */
  constructor(options) {
    this.url = websocketUrl(options.url, options.apiKey);
    this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (!this.WebSocket) throw new Error("no WebSocket: pass `WebSocket` (Node 20: --experimental-websocket)");
    this.codec = options.codec ?? null;
    this.backoff = { initialMs: 250, maxMs: 5000, ...options.backoff };
    this.state = "idle";
    this.ws = null;
    this.closed = false;
    this.delay = this.backoff.initialMs;
    this.queue = [];
    this.frameListeners = new Set();
    this.stateListeners = new Set();
    this.lastSeq = new Map();   // thread id → the highest seq seen
    this.turns = new Map();     // thread id → the Turn being followed
    this.requests = new Map();  // request id → the Turn that sent it
    this.nextRequest = 1;
    this.opened = null;
  }

  /** Open the connection; resolves once it is up (rejects if the first attempt fails). */
  connect() {
    if (!this.opened) {
      this.opened = new Promise((resolve, reject) => this.open(resolve, reject));
    }
    return this.opened;
  }

  /** Close for good: no reconnecting; turns still followed end with `connection_closed`. */
  close() {
    this.closed = true;
    this.ws?.close(1000);
    this.setState("closed");
    this.failAll(new WeftError("connection_closed", "the client was closed"));
  }

  /** Lose the connection as a network would (it reconnects and resumes); for tests and stuck sockets. */
  drop() {
    this.ws?.close(DROP_CODE, "dropped by the client");
  }

  /** Every frame received (after de-duplication); returns a function that unsubscribes. */
  onFrame(listener) {
    this.frameListeners.add(listener);
    return () => this.frameListeners.delete(listener);
  }

  /** Connection state changes: `connecting`, `open`, `reconnecting`, `closed`. */
  onState(listener) {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Send a raw client frame (queued while the connection is down). */
  send(frame) {
    // A resume states what the caller has seen of the thread: frames after it are shown.
    if (frame.command === "resume_chat") this.lastSeq.set(frame.data.thread_id, frame.data.last_seq ?? 0);
    const body = this.codec ? this.codec.encode(frame) : JSON.stringify(frame);
    if (this.ws && this.ws.readyState === 1) {
      this.ws.send(body);
      return true;
    }
    this.queue.push(body);
    return false;
  }

  /**
   * Send a chat message and follow its turn. `content` is text or content parts; `options`
   * holds any other `chat_message` field in camelCase or snake_case (`threadId`,
   * `permissionMode`, `mode`, `agent`, `provider`, `model`, …). A new chat gets a fresh
   * thread id, known at once as `turn.threadId`.
   */
  chat(content, options = {}) {
    const data = { content };
    for (const [key, value] of Object.entries(options)) {
      if (value !== undefined) data[key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = value;
    }
    data.thread_id ??= newThreadId();
    const turn = this.follow(data.thread_id);
    const requestId = `r${this.nextRequest++}`;
    this.requests.set(requestId, turn);
    turn.requestId = requestId;
    turn.sent = this.send({ command: "chat_message", request_id: requestId, data });
    this.connect().catch((error) => turn.fail(error));
    return turn;
  }

  /** Follow a thread's running turn from `lastSeq` (default: what this client saw of it). */
  resume(threadId, lastSeq) {
    const turn = this.follow(threadId);
    turn.started = true;
    this.send({ command: "resume_chat", data: { thread_id: threadId, last_seq: lastSeq ?? this.lastSeq.get(threadId) ?? 0 } });
    this.connect().catch((error) => turn.fail(error));
    return turn;
  }

  /** Answer an approval: `allow`, `allow_for_chat` or `deny` (with an optional reason). */
  respond(toolCallId, decision, reason) {
    const frame = { type: "tool_approval_response", tool_call_id: toolCallId, decision };
    if (reason !== undefined) frame.reason = reason;
    this.send(frame);
  }
  allow(toolCallId) { this.respond(toolCallId, "allow"); }
  allowForChat(toolCallId) { this.respond(toolCallId, "allow_for_chat"); }
  deny(toolCallId, reason) { this.respond(toolCallId, "deny", reason); }

  /** Stop the thread's running turn (what it produced is kept). */
  stop(threadId) {
    this.send({ command: "stop", data: { thread_id: threadId } });
  }

  /** Change the thread's permission mode: `plan`, `default` or `auto`. */
  setPermissionMode(threadId, permissionMode) {
    this.send({ command: "set_permission_mode", data: { thread_id: threadId, permission_mode: permissionMode } });
  }

  // ---- internals ----

  follow(threadId) {
    this.turns.get(threadId)?.fail(new WeftError("superseded", "another turn of this thread is followed now"));
    const turn = new Turn(this, threadId);
    this.turns.set(threadId, turn);
    return turn;
  }

  setState(state) {
    if (this.state === state) return;
    this.state = state;
    for (const listener of this.stateListeners) listener(state);
  }

  open(resolve, reject) {
    this.setState(this.state === "idle" ? "connecting" : "reconnecting");
    const ws = new this.WebSocket(this.url);
    if (this.codec) ws.binaryType = "arraybuffer";
    this.ws = ws;
    let up = false;
    ws.onopen = () => {
      up = true;
      this.delay = this.backoff.initialMs;
      this.setState("open");
      this.resumeAll();
      for (const body of this.queue.splice(0)) ws.send(body);
      for (const turn of this.turns.values()) turn.sent = true;
      resolve?.();
    };
    ws.onmessage = (event) => this.receive(event.data);
    const closed = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      if (!up && resolve) {
        // The first attempt failed: the caller learns it from connect().
        this.opened = null;
        this.setState("idle");
        reject(new WeftError("connection_failed", `cannot connect to ${this.url.replace(/api_key=[^&]*/, "api_key=…")}`));
        this.failAll(new WeftError("connection_failed", "cannot connect"));
        return;
      }
      if (this.closed) return;
      if (FINAL_CLOSE_CODES.has(event.code)) return this.close();
      this.lostConnection();
      const wait = this.delay * (0.5 + Math.random() / 2);
      this.delay = Math.min(this.delay * 2, this.backoff.maxMs);
      this.setState("reconnecting");
      setTimeout(() => { if (!this.closed) this.open(); }, wait);
    };
    ws.onclose = closed;
    // A refused handshake: some WebSocket implementations (Node 20's) report only an error.
    ws.onerror = () => { if (!up) closed({ code: 1006 }); };
  }

  /** The connection went: a turn whose message may or may not have reached the server is refused. */
  lostConnection() {
    for (const turn of [...this.turns.values()]) {
      if (turn.sent && !turn.started) {
        turn.fail(new WeftError("connection_lost",
          "the connection closed before the turn started: it may or may not have started (resume the thread to see)"));
      }
    }
  }

  /** End every followed turn with `error`. */
  failAll(error) {
    for (const turn of [...this.turns.values()]) turn.fail(error);
  }

  /** A turn that has ended is no longer followed. */
  forget(turn) {
    if (this.turns.get(turn.threadId) === turn) this.turns.delete(turn.threadId);
    this.requests.delete(turn.requestId);
  }

  /** After (re)connecting: every followed turn goes on from the last frame seen of its thread. */
  resumeAll() {
    for (const [threadId, turn] of this.turns) {
      if (!turn.started) continue;
      const frame = { command: "resume_chat", data: { thread_id: threadId, last_seq: this.lastSeq.get(threadId) ?? 0 } };
      this.ws.send(this.codec ? this.codec.encode(frame) : JSON.stringify(frame));
    }
  }

  receive(data) {
    let frame;
    try {
      frame = this.codec && typeof data !== "string" ? this.codec.decode(new Uint8Array(data)) : JSON.parse(data);
    } catch {
      return; // not a frame: nothing to follow
    }
    const threadId = frame.thread_id;
    if (threadId && typeof frame.seq === "number") {
      // A frame seen before a resume is not shown twice.
      if (frame.seq <= (this.lastSeq.get(threadId) ?? -1)) return;
      this.lastSeq.set(threadId, frame.seq);
    }
    for (const listener of this.frameListeners) listener(frame);
    const turn = threadId ? this.turns.get(threadId) : this.requests.get(frame.request_id);
    turn?.receive(frame);
  }
}

/**
 * One turn followed to its end: an async iterator of its frames, `message` (a promise of the
 * stored assistant message), and `view` (the frames folded into the tree of cards).
 */
export class Turn {
  constructor(client, threadId) {
    this.client = client;
    this.threadId = threadId;
    this.requestId = null;
    this.sent = false;
    this.started = false;
    this.finished = false;
    this.view = new TurnView();
    this.buffer = [];
    this.waiting = null;
    this.error = null;
    this.stored = null;
    this.message = new Promise((resolve, reject) => { this.settle = { resolve, reject }; });
    this.message.catch(() => {}); // a caller that only iterates still sees the error there
  }

  /** Stop this turn on the server. */
  stop() { this.client.stop(this.threadId); }

  /** The answer's text as it stands (the whole answer once the turn has ended). */
  get text() { return this.view.text; }

  receive(frame) {
    if (frame.type === "turn_started" || frame.type === "turn_resumed") this.started = true;
    if (frame.type === "message") this.stored = frame.message;
    if (frame.type === "error" && !this.error) this.error = new WeftError(frame.code, frame.message, frame);
    this.view.apply(frame);
    const last = frame.type === "chunk" && frame.done && !frame.parent_id;
    // An error about the command itself (no thread in the frame) also ends the turn: it never started.
    const refused = frame.type === "error" && !frame.thread_id;
    this.push(frame);
    if (last || refused) this.end();
  }

  end() {
    this.finished = true;
    this.client.forget(this);
    if (this.stored && (!this.error || this.stored.status !== "running")) this.settle.resolve(this.stored);
    else this.settle.reject(this.error ?? new WeftError("internal", "the turn ended without its message"));
    this.push(null);
  }

  fail(error) {
    if (this.finished) return;
    this.finished = true;
    this.client.forget(this);
    this.error = error;
    this.settle.reject(error);
    this.push(null);
  }

  push(frame) {
    if (this.waiting) {
      const waiting = this.waiting;
      this.waiting = null;
      waiting(frame);
    } else {
      this.buffer.push(frame);
    }
  }

  async *[Symbol.asyncIterator]() {
    for (;;) {
      const frame = this.buffer.length ? this.buffer.shift() : await new Promise((resolve) => { this.waiting = resolve; });
      if (frame === null) {
        if (this.error && !this.stored) throw this.error;
        return;
      }
      yield frame;
    }
  }
}

/**
 * A turn's frames folded into what a chat UI draws: the answer's `items` in the order they
 * happened (text blocks, one per round, and tool-call cards), each card holding its own
 * `items` (a subtask's text and calls), its approval and its result; plus the plan, the
 * budget notices, the cost and the error.
 */
export class TurnView {
  constructor() {
    this.messageId = null;
    this.items = [];
    this.cards = new Map();
    this.plan = null;
    this.budget = [];
    this.cost = null;
    this.error = null;
    this.status = "running";
  }

  /** The root answer's text. */
  get text() {
    return this.items.filter((item) => item.kind === "text").map((item) => item.text).join("");
  }

  /** The calls waiting for the user's decision. */
  get pendingApprovals() {
    return [...this.cards.values()].filter((card) => card.approval && !card.approval.decision);
  }

  itemsOf(parentId) {
    return (parentId && this.cards.get(parentId)?.items) || this.items;
  }

  apply(frame) {
    switch (frame.type) {
      case "turn_started":
        this.messageId = frame.message_id;
        break;
      case "turn_resumed":
        // Taken up after its server stopped: `content` is the answer so far, and replaces it.
        this.messageId = frame.message_id;
        this.replaceText(frame.content ?? "");
        break;
      case "chunk":
        if (!frame.content) break;
        {
          const items = this.itemsOf(frame.parent_id);
          const last = items[items.length - 1];
          if (last && last.kind === "text") last.text += frame.content;
          else items.push({ kind: "text", text: frame.content });
        }
        break;
      case "tool_call_update":
        if (frame.status === "start") this.card(frame).status = "running";
        else Object.assign(this.card(frame), { status: frame.is_error ? "error" : "done", result: frame.result ?? null, isError: !!frame.is_error, metadata: frame.metadata ?? null });
        break;
      case "tool_approval_request":
        this.card(frame).approval = { category: frame.category, args: frame.args, decision: null };
        break;
      case "tool_approval_resolved": {
        const card = this.cards.get(frame.tool_call_id);
        if (card?.approval) card.approval.decision = frame.decision;
        break;
      }
      case "planning_update":
        if (!frame.parent_id) this.plan = { status: frame.status, content: frame.content };
        break;
      case "budget_exceeded":
        this.budget.push(frame);
        break;
      case "cost_summary":
        this.cost = frame;
        break;
      case "message":
        this.messageId = frame.message.id;
        this.status = frame.message.status ?? "completed";
        this.fromStored(frame.message);
        break;
      case "error":
        this.error = { code: frame.code, message: frame.message };
        break;
    }
  }

  /**
   * Make the root text `text`: usually what is shown less a cut round's partial text, so it is
   * trimmed from the end and the cards keep their places; otherwise one block replaces it all.
   */
  replaceText(text) {
    if (this.text.startsWith(text)) {
      let excess = this.text.length - text.length;
      for (let i = this.items.length - 1; i >= 0 && excess > 0; i--) {
        const item = this.items[i];
        if (item.kind !== "text") continue;
        const cut = Math.min(excess, item.text.length);
        item.text = item.text.slice(0, item.text.length - cut);
        excess -= cut;
        if (!item.text) this.items.splice(i, 1);
      }
    } else {
      this.items = this.items.filter((item) => item.kind !== "text");
      if (text) this.items.unshift({ kind: "text", text });
    }
  }

  /** The card of a call, made on its first frame (under its parent's card when it has one). */
  card(frame) {
    let card = this.cards.get(frame.tool_call_id);
    if (!card) {
      card = { kind: "tool", id: frame.tool_call_id, name: frame.name, args: frame.args ?? null, depth: frame.depth ?? 0,
        parentId: frame.parent_id ?? null, status: "running", result: null, isError: false, metadata: null,
        approval: null, items: [] };
      this.cards.set(card.id, card);
      this.itemsOf(card.parentId).push(card);
    }
    return card;
  }

  /** A stored message (a resume that missed more than the server keeps): its text and tree stand for what was missed. */
  fromStored(message) {
    const text = typeof message.content === "string" ? message.content
      : (message.content || []).filter((part) => part.type === "text").map((part) => part.text).join("");
    for (const node of message.execution_tree?.nodes ?? []) {
      const card = this.card({ tool_call_id: node.id, name: node.name, parent_id: node.parent_id, args: node.args_preview });
      if (card.status === "running" && message.status !== "running") {
        Object.assign(card, { status: node.is_error ? "error" : "done", result: node.result_preview ?? null, isError: !!node.is_error });
      }
    }
    if (text.length > this.text.length && text.startsWith(this.text)) {
      const rest = text.slice(this.text.length);
      const last = this.items[this.items.length - 1];
      if (last && last.kind === "text") last.text += rest;
      else this.items.push({ kind: "text", text: rest });
    }
  }
}
