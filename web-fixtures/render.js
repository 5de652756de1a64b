// DOM rendering: messages, nested tool-call cards, approval cards, notices.

import { highlight } from "./markdown.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  // A block of code or output may scroll: keyboard users must be able to reach it.
  if (tag === "pre" && !node.hasAttribute("tabindex")) node.tabIndex = 0;
  for (const c of children) if (c) node.append(c);
  return node;
}

function pretty(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

export function userMessage(text) {
  return el("div", { class: "message user" }, el("div", { class: "text", text }));
}

/// An answer: its `flow` holds, in the order they happened, a text block per round of the
/// model and the cards of the calls it made; `text` is the block being written, if any.
export function assistantMessage() {
  const flow = el("div", { class: "flow" });
  const root = el("div", { class: "message assistant" }, flow);
  return { root, flow, text: null };
}

/// The answer's current text block (a new one after a card).
export function textBlock(view) {
  if (!view.text) {
    view.text = el("div", { class: "text" });
    view.flow.append(view.text);
  }
  return view.text;
}

/// A root call's card, after what came before it; the next text starts a new block.
export function placeCard(view, card) {
  view.flow.append(card);
  view.text = null;
}

/// The planner's plan above an answer, collapsible: `started` (planning…), `done`, `failed`.
export function planView(status, content, open) {
  const label = { started: "planning…", done: "", failed: "planning failed" }[status] ?? status;
  const view = el("details", { class: "plan", "data-status": status },
    el("summary", {}, el("span", { text: "Plan" }), label ? el("span", { class: "badge", text: label }) : null),
    el("pre", { class: "plan-text", text: content || "" }));
  view.open = open;
  return view;
}

/// A tool-call card; depth-0 cards start open, deeper ones collapsed.
export function toolCard({ id, name, title, args, depth }) {
  const card = el("details", { class: "tool-card", "data-id": id, "data-name": name, "data-status": "running", "data-depth": depth });
  if (!depth) card.open = true;
  const summary = el("summary", {},
    el("span", { class: "name", text: name }),
    title ? el("span", { class: "title", text: title }) : null,
    el("span", { class: "badge", text: "running" }));
  const body = el("div", { class: "body" });
  if (args !== undefined && args !== null && args !== "") body.append(...argsView(args));
  const stream = el("div", { class: "stream" });
  const children = el("div", { class: "children" });
  const result = el("div", { class: "result-slot" });
  body.append(stream, children, result);
  card.append(summary, body);
  return card;
}

/// A call's arguments: as JSON, except that text of several lines (a file's content) shows
/// as itself under its name rather than as one escaped string.
function argsView(args) {
  const object = parsed(args);
  const long = object ? Object.entries(object).filter(([, v]) => typeof v === "string" && v.includes("\n")) : [];
  if (!long.length) return [el("div", { class: "label", text: "arguments" }), el("pre", { class: "args", text: pretty(args) })];
  const rest = Object.fromEntries(Object.entries(object).filter(([k]) => !long.some(([l]) => l === k)));
  const views = Object.keys(rest).length
    ? [el("div", { class: "label", text: "arguments" }), el("pre", { class: "args", text: pretty(rest) })]
    : [];
  for (const [name, text] of long) views.push(el("div", { class: "label", text: name }), el("pre", { class: "args", "data-field": name, text }));
  return views;
}

export function finishCard(card, { result, isError, durationMs }) {
  card.dataset.status = isError ? "error" : "done";
  const badge = card.querySelector(":scope > summary .badge");
  const took = durationMs !== undefined ? ` · ${durationMs < 1000 ? `${Math.round(durationMs)} ms` : `${(durationMs / 1000).toFixed(1)} s`}` : "";
  badge.textContent = (isError ? "error" : "done") + took;
  const slot = card.querySelector(":scope > .body > .result-slot");
  slot.replaceChildren(el("div", { class: "label", text: isError ? "error" : "result" }), el("pre", { class: "result", text: pretty(result) }));
}

/// Sources an answer drew on (knowledge hits), numbered for citing.
export function citationsView(hits) {
  const items = hits.map((h, i) => el("li", { "data-document": h.document },
    el("b", { text: h.title || h.document }),
    h.collection ? el("span", { class: "collection", text: ` · ${h.collection}` }) : null,
    typeof h.score === "number" ? el("span", { class: "score", text: ` · ${h.score.toFixed(3)}` }) : null,
    el("blockquote", { text: h.chunk.length > 280 ? `${h.chunk.slice(0, 280)}…` : h.chunk })));
  const view = el("details", { class: "citations" },
    el("summary", { text: `Sources (${hits.length})` }), el("ol", {}, ...items));
  view.open = true;
  return view;
}

export function notice(kind, text) {
  return el("div", { class: `notice ${kind}`, text });
}

export function costLine(c) {
  const usd = c.cost_usd ? ` · $${c.cost_usd.toFixed(4)}` : "";
  return el("div", { class: "cost", text: `${c.llm_calls} model calls · ${c.tool_calls} tool calls · ${c.input_tokens} in / ${c.output_tokens} out tokens${usd}` });
}

/// The approval card for the first pending request, with how many more are queued: the
/// buttons first (a long request scrolls below them), then what it would do — for a file
/// write its path and its content as highlighted code (folded when long).
export function approvalCard(request, queued, onDecision) {
  const buttons = [["allow", "Allow"], ["allow_for_chat", "Allow for this chat"], ["deny", "Deny"]].map(([decision, label]) => {
    const b = el("button", { type: "button", "data-decision": decision, text: label });
    b.onclick = () => onDecision(request.tool_call_id, decision);
    return b;
  });
  const args = parsed(request.args);
  const write = args && typeof args.path === "string" && typeof args.content === "string";
  const what = el("div", { class: "what" }, "The agent wants to run ", el("b", { text: request.name }),
    ` (${request.category})`, write ? " on " : null, write ? el("code", { class: "path", text: args.path }) : null, ".");
  return el("div", { class: "approval", role: "group", "aria-label": `Approve ${request.name}?`, "data-id": request.tool_call_id },
    what,
    el("div", { class: "actions" }, ...buttons, queued > 0 ? el("span", { class: "queued", text: `+${queued} more pending` }) : null),
    write ? filePreview(args) : el("pre", { class: "detail", text: pretty(request.args) }));
}

/// Arguments as an object, if they are one (they come as an object or as JSON text).
function parsed(args) {
  if (args && typeof args === "object") return args;
  try { const value = JSON.parse(args); return value && typeof value === "object" ? value : null; } catch { return null; }
}

/// A file's content about to be written: highlighted by its extension, folded past 12 lines.
function filePreview({ path, content }) {
  const lines = content.split("\n").length;
  const code = el("code", { text: content });
  highlight(code, { js: "javascript", ts: "typescript", py: "python", rs: "rust", md: "markdown", sh: "bash", yml: "yaml" }[path.split(".").pop()] ?? path.split(".").pop());
  const preview = el("details", { class: "detail file-preview" },
    el("summary", { text: `${lines} line${lines === 1 ? "" : "s"}, ${content.length} characters` }),
    el("pre", {}, code));
  preview.open = lines <= 12;
  return preview;
}

/// A turn's trace: each response with its calls, each full result, subtasks nested under the
/// call that ran them.
export function traceView(entries) {
  const list = el("ol", { class: "trace" });
  for (const e of entries) {
    if (e.kind === "assistant") {
      const calls = (e.tool_calls || []).map((c) => el("li", { class: "trace-call" },
        el("span", { class: "name", text: c.name }), el("pre", { text: pretty(c.arguments) })));
      list.append(el("li", { class: "trace-assistant", "data-kind": "assistant" },
        el("div", { class: "label", text: e.partial ? "assistant (cut short)" : "assistant" }),
        e.text ? el("div", { class: "text", text: e.text }) : null,
        calls.length ? el("ul", { class: "trace-calls" }, ...calls) : null));
    } else if (e.kind === "tool_result") {
      list.append(el("li", { class: `trace-result${e.is_error ? " error" : ""}`, "data-kind": "tool_result" },
        el("div", { class: "label", text: `${e.name} ${e.is_error ? "failed" : "returned"}` }),
        el("pre", { class: "result", text: e.result })));
    } else if (e.kind === "summary") {
      list.append(el("li", { class: "trace-summary", "data-kind": "summary" },
        el("div", { class: "label", text: `earlier conversation compacted (kept the last ${e.kept_messages} messages)` }),
        el("div", { class: "text", text: e.summary })));
    } else if (e.kind === "subtask") {
      const inner = el("details", { class: "trace-subtask", "data-kind": "subtask", open: "" },
        el("summary", { text: "subtask" }), traceView(e.trace || []));
      list.append(el("li", {}, inner));
    }
  }
  return list;
}
