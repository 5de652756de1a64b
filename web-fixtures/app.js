// Weft's reference client: threads, agents, composer, permission modes, streaming text, the
// plan, nested tool-call cards, inline approvals, budget notices, cost, reload and resume;
// the workflows panel and its editor live in workflows.js.

import { WeftClient } from "./weft-client.js";
import { initWorkflows, onWorkflowFrame, runClientTool, chatContext, MANIFEST } from "./workflows.js";
import { setMarkdown, appendMarkdown, aroundRender, markdownOf } from "./markdown.js";
import { el, userMessage, assistantMessage, textBlock, placeCard, planView, toolCard, finishCard, notice, costLine, approvalCard, traceView, citationsView } from "./render.js";

const $ = (id) => document.getElementById(id);
const MODES = { plan: "Plan", default: "Default", auto: "Auto" };

const state = {
  threadId: null,        // the thread on screen (null: a new chat)
  mode: "default",       // the mode for the thread on screen
  agent: "default",      // the agent for the thread on screen
  execMode: "classic",   // the execution mode of the next message (classic, code)
  running: false,        // a turn of this thread is streaming
  lastSeq: {},           // thread id → last seq seen (for resume_chat)
  live: null,            // the assistant message being streamed
  cards: new Map(),      // tool_call_id → card element
  approvals: [],         // pending approval requests, oldest first
};

// Remember a key given in the address, so reloads keep working.
const keyParam = new URLSearchParams(location.search).get("api_key");
if (keyParam) localStorage.setItem("weft_api_key", keyParam);

// The connection is @weft/client's (clients/typescript/): reconnects with backoff, frames
// of a thread never shown twice; this page sends its own commands and resumes itself.
const socket = new WeftClient({ url: location.origin, apiKey: keyParam || localStorage.getItem("weft_api_key") || undefined });
socket.onFrame(onFrame);
socket.onState((s) => onConnection(s === "open" ? "up" : "down"));
const connect = () => socket.connect().catch(() => { onConnection("down"); setTimeout(connect, 2000); });
connect();

function headers() {
  const key = new URLSearchParams(location.search).get("api_key") || localStorage.getItem("weft_api_key");
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// ---- threads ----

async function loadThreads() {
  const res = await fetch("/threads", { headers: headers() });
  if (res.status === 401) {
    $("connection").textContent = "API key needed: open /?api_key=YOUR_KEY";
    return [];
  }
  if (!res.ok) return [];
  const threads = await res.json();
  const list = $("threads");
  list.replaceChildren(...threads.map((t) => {
    const title = t.title || "Untitled";
    const open = el("button", { type: "button", class: "thread-open", text: title });
    const rename = el("button", { type: "button", class: "thread-action", "data-action": "rename", title: "Rename", "aria-label": `Rename “${title}”`, text: "✎" });
    const remove = el("button", { type: "button", class: "thread-action", "data-action": "delete", title: "Delete", "aria-label": `Delete “${title}”`, text: "✕" });
    const li = el("li", { "data-id": t.id }, open, rename, remove);
    rename.onclick = () => renameThread(li, t);
    remove.onclick = () => deleteThread(t);
    if (t.id === state.threadId) {
      li.classList.add("current");
      // A new chat's header takes its title once the server has one (its first message).
      $("thread-title").textContent = t.title || "Untitled";
    }
    if (t.active) li.classList.add("active");
    if (t.id === state.threadId) open.setAttribute("aria-current", "page");
    open.onclick = () => { showDrawer(false); openThread(t.id); };
    return li;
  }));
  return threads;
}

/// Rename a chat in place: its name becomes a field; Enter saves, Esc (or leaving it) keeps it.
function renameThread(li, thread) {
  const field = el("input", { class: "thread-rename", "aria-label": "New name", maxlength: "200" });
  field.value = thread.title || "";
  li.replaceChildren(field);
  field.focus();
  field.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const title = field.value.trim();
    if (save && title && title !== thread.title) {
      const res = await fetch(`/threads/${encodeURIComponent(thread.id)}`, {
        method: "PATCH", headers: { ...headers(), "Content-Type": "application/json" }, body: JSON.stringify({ title }),
      });
      if (res.ok && thread.id === state.threadId) $("thread-title").textContent = title;
    }
    await loadThreads();
    $("threads").querySelector(`li[data-id="${CSS.escape(thread.id)}"] .thread-open`)?.focus();
  };
  field.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); finish(true); }
    else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
  });
  field.addEventListener("blur", () => finish(false));
}

/// Delete a chat and everything in it, once the user confirms.
async function deleteThread(thread) {
  if (!confirm(`Delete “${thread.title || "Untitled"}” and everything in it?`)) return;
  const res = await fetch(`/threads/${encodeURIComponent(thread.id)}`, { method: "DELETE", headers: headers() });
  if (!res.ok && res.status !== 404) return;
  if (thread.id === state.threadId) newThread(); else loadThreads();
}

/// The agents the user may pick (the server's default first).
async function loadAgents() {
  const res = await fetch("/agents", { headers: headers() });
  if (!res.ok) return;
  const names = (await res.json()).map((a) => a.name);
  const select = $("agent-select");
  select.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
  setAgent(names.includes(state.agent) ? state.agent : "default");
}

/// The execution modes the server offers.
async function loadModes() {
  const res = await fetch("/modes", { headers: headers() });
  if (!res.ok) return;
  const select = $("exec-mode");
  select.replaceChildren(...(await res.json()).map((m) => el("option", { value: m.name, text: m.display_name })));
  select.value = state.execMode;
}

function setAgent(name) {
  state.agent = name;
  const select = $("agent-select");
  if (![...select.options].some((o) => o.value === name)) select.append(el("option", { value: name, text: name }));
  select.value = name;
}

function resetView() {
  $("messages").replaceChildren();
  $("approvals").replaceChildren();
  state.cards.clear();
  state.approvals = [];
  state.live = null;
  setRunning(false);
}

async function openThread(id) {
  resetView();
  state.threadId = id;
  showAddress(id);
  const threads = await loadThreads();
  const meta = threads.find((t) => t.id === id);
  $("thread-title").textContent = meta ? meta.title || "Untitled" : "Thread";
  setMode(meta ? meta.permission_mode : "default", false);
  setAgent((meta && meta.agent) || "default");
  const res = await fetch(`/threads/${id}/messages`, { headers: headers() });
  if (!res.ok) return;
  const messages = await res.json();
  // A running answer is not drawn from the store: its turn's frames replay it below.
  const running = messages.some((m) => m.role === "assistant" && m.status === "running");
  const rounds = await roundsOf(id);
  for (const m of messages) if (!(m.role === "assistant" && m.status === "running")) renderStored(m, true, rounds.get(m.id));
  if ((meta && meta.active) || running) {
    // A turn is still running (another tab, or before a reload): replay it and follow it.
    state.lastSeq[id] = 0;
    socket.send({ command: "resume_chat", data: { thread_id: id, last_seq: 0 } });
  } else showExchangeActions();
  scrollDown();
}

/// Each answer's rounds, from the thread's record: a round's text, then each call it made.
async function roundsOf(threadId) {
  const rounds = new Map();
  const res = await fetch(`/threads/${threadId}/items`, { headers: headers() });
  if (!res.ok) return rounds;
  for (const item of await res.json()) {
    if (item.kind !== "assistant" || !item.message_id) continue;
    const list = rounds.get(item.message_id) ?? [];
    list.push({ text: item.text });
    for (const call of item.tool_calls || []) list.push({ call: call.id });
    rounds.set(item.message_id, list);
  }
  return rounds;
}

function newThread() {
  resetView();
  state.threadId = null;
  showAddress(null);
  $("thread-title").textContent = "New chat";
  setMode("default", false);
  setAgent("default");
  loadThreads();
  $("input").focus();
}

/// A persisted message, with its execution tree rebuilt as nested cards; appended to the
/// page unless `append` is false. `rounds` (from the thread's record) put each round's text
/// and its calls' cards in the order they happened; without them, the cards come first.
/// Returns its element.
function renderStored(m, append = true, rounds = []) {
  const text = typeof m.content === "string" ? m.content : (m.content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
  if (m.role === "user") { const u = userMessage(text); if (append) $("messages").append(u); return u; }
  const view = assistantMessage();
  const roots = [];
  for (const node of (m.execution_tree && m.execution_tree.nodes) || []) {
    const parent = node.parent_id ? state.cards.get(node.parent_id) : null;
    const depth = parent ? Number(parent.dataset.depth) + 1 : 0;
    const card = toolCard({ id: node.id, name: node.name, title: node.title, args: shownArgs(node.name, node.args_preview), depth });
    finishCard(card, { result: node.result_preview, isError: node.is_error, durationMs: node.duration_ms });
    if (!node.is_error) showImage(card, node.result_preview);
    state.cards.set(node.id, card);
    if (parent) parent.querySelector(":scope > .body > .children").append(card); else roots.push(card);
  }
  const placed = new Set();
  let roundText = "";
  for (const round of rounds) {
    if (round.text) { roundText += round.text; setMarkdown(textBlock(view), round.text); view.text = null; }
    const card = roots.find((c) => c.dataset.id === round.call);
    if (card && !placed.has(card)) { placeCard(view, card); placed.add(card); }
  }
  for (const card of roots) if (!placed.has(card)) placeCard(view, card);
  // Text the record does not hold by round (code mode writes through output()).
  if (!roundText.trim() && text) setMarkdown(textBlock(view), text);
  // Generated media (route 2) after the text.
  for (const part of Array.isArray(m.content) ? m.content : []) {
    const media = part.type === "image_url" ? mediaView(part.image_url, "image/")
      : part.type === "audio_url" ? mediaView(part.audio_url, "audio/") : null;
    if (media) view.root.append(media);
  }
  view.root.dataset.id = m.id;
  if (m.metadata && m.metadata.mode) view.root.dataset.mode = m.metadata.mode;
  if (m.metadata && m.metadata.plan) view.root.prepend(planView("done", m.metadata.plan, false));
  if (append && m.cost_usd !== undefined && m.input_tokens !== undefined) {
    view.root.append(el("div", { class: "cost", text: `${m.input_tokens} in / ${m.output_tokens} out tokens${m.cost_usd ? ` · $${m.cost_usd.toFixed(4)}` : ""}` }));
  }
  const ended = endNotice(m);
  if (ended) view.root.append(ended);
  addTraceButton(view.root, m.id);
  if (append) $("messages").append(view.root);
  return view.root;
}

/// How a stored answer ended, when not by finishing: the error its turn reported (as the live
/// page showed it), or that the budget or a stopped server cut it short.
function endNotice(m) {
  const error = m.metadata && m.metadata.error;
  if (error) return errorNotice(`${error.code}: ${error.message}`);
  if (m.status === "budget_exceeded") return notice("budget", "Stopped: the budget was reached.");
  if (m.status === "interrupted") return notice("error", "Interrupted: the server stopped before this answer finished.");
  return null;
}

/// A "Trace" toggle under an assistant message: everything the turn did, in order, with full
/// results and subtasks nested.
function addTraceButton(root, messageId) {
  if (!messageId || !state.threadId || root.querySelector(":scope > .trace-toggle")) return;
  const threadId = state.threadId;
  const button = el("button", { type: "button", class: "trace-toggle", text: "Trace" });
  const panel = el("div", { class: "trace-panel", hidden: "" });
  button.onclick = async () => {
    if (!panel.hidden) { panel.hidden = true; return; }
    const res = await fetch(`/threads/${threadId}/messages/${messageId}/trace`, { headers: headers() });
    if (!res.ok) { panel.replaceChildren(notice("error", `trace unavailable (${res.status})`)); panel.hidden = false; return; }
    const body = await res.json();
    panel.replaceChildren(traceView(body.trace));
    panel.hidden = false;
  };
  root.append(button, panel);
}

// ---- live frames ----

function onFrame(f) {
  if (f.type === "pong") return;
  if (f.thread_id && f.seq) state.lastSeq[f.thread_id] = Math.max(state.lastSeq[f.thread_id] || 0, f.seq);
  if (f.type === "error" && !f.thread_id) { $("messages").append(notice("error", `${f.code}: ${f.message}`)); setRunning(false); scrollDown(); return; }
  if (f.thread_id && state.threadId && f.thread_id !== state.threadId) { loadThreads(); return; }
  // Follow the answer only while the reader is at the bottom: reading back is left alone.
  const follow = atBottom();
  switch (f.type) {
    case "turn_started":
      if (!state.threadId) { state.threadId = f.thread_id; showAddress(f.thread_id); }
      loadThreads();
      state.live = assistantMessage();
      state.live.root.dataset.mode = f.mode;
      $("messages").append(state.live.root);
      setRunning(true);
      break;
    case "turn_resumed":
      // The server running the turn stopped and another took it up: its answer so far
      // replaces what streamed (a cut round's text streams again); the cards stay.
      ensureLive();
      for (const block of state.live.flow.querySelectorAll(":scope > .text")) block.remove();
      state.live.text = null;
      setMarkdown(textBlock(state.live), f.content);
      setRunning(true);
      break;
    case "chunk":
      if (f.done) { finishTurn(); break; }
      ensureLive();
      if (!f.depth) appendMarkdown(textBlock(state.live), f.content);
      else {
        const parent = state.cards.get(f.parent_id);
        if (parent) parent.querySelector(":scope > .body > .stream").textContent += f.content;
      }
      break;
    case "tool_call_update": onToolUpdate(f); break;
    case "planning_update": {
      ensureLive();
      if (f.parent_id) {
        // A tool planning its own work (build_workflow): shown in its card, not as the turn's plan.
        const card = state.cards.get(f.parent_id);
        if (card) card.querySelector(":scope > .body > .stream").textContent = `${f.status}: ${f.content}`;
        break;
      }
      const shown = state.live.root.querySelector(":scope > .plan");
      const plan = planView(f.status, f.content || (shown ? shown.querySelector(".plan-text").textContent : ""), true);
      if (shown) shown.replaceWith(plan); else state.live.root.prepend(plan);
      break;
    }
    case "tool_approval_request": {
      const card = state.cards.get(f.tool_call_id);
      if (card) { card.dataset.status = "asking"; card.querySelector(":scope > summary .badge").textContent = "awaiting approval"; }
      if (!state.approvals.some((a) => a.tool_call_id === f.tool_call_id)) state.approvals.push(f);
      renderApprovals();
      break;
    }
    case "tool_approval_resolved":
      state.approvals = state.approvals.filter((a) => a.tool_call_id !== f.tool_call_id);
      renderApprovals();
      break;
    case "budget_exceeded":
      if (f.ends_turn !== false) $("messages").append(notice("budget", `Budget reached: ${f.reason.replace("_", " ")} (limit ${f.limit}, used ${f.observed}). The turn stopped; what it produced is kept.`));
      break;
    case "cost_summary": ensureLive(); state.live.root.append(costLine(f)); break;
    case "message": onStoredAnswer(f.message); break;
    case "job_update": case "node_update": onWorkflowFrame(f); break;
    case "mcp_progress": {
      // A long call (an MCP tool) reports how far it has got: a bar in its card.
      const card = state.cards.get(f.tool_call_id);
      if (!card) break;
      const body = card.querySelector(":scope > .body");
      let row = body.querySelector(":scope > .progress");
      if (!row) { row = el("div", { class: "progress" }, el("progress", {}), el("span", { class: "progress-text" })); body.prepend(row); }
      const bar = row.querySelector("progress");
      if (f.total) { bar.max = f.total; bar.value = f.progress; } else bar.removeAttribute("value");
      row.querySelector(".progress-text").textContent = f.message || (f.total ? `${f.progress} / ${f.total}` : String(f.progress));
      card.querySelector(":scope > summary .badge").textContent = f.total ? `${Math.round((100 * f.progress) / f.total)}%` : "working…";
      break;
    }
    case "tool_call": {
      // The agent runs one of this page's `ui_*` tools.
      const answer = runClientTool(f.name, f.args);
      socket.send({ type: "tool_result", tool_call_id: f.tool_call_id, ...answer });
      break;
    }
    case "error": $("messages").append(errorNotice(`${f.code}: ${f.message}`)); break;
  }
  if (follow) scrollDown();
}

/// The stored answer at a turn's end. What streamed stays (in the order it happened) when it
/// says what the store says; otherwise the stored one replaces it (frames missed while
/// disconnected, say).
function onStoredAnswer(message) {
  const live = state.live;
  const said = (m) => typeof m.content === "string" ? m.content : (m.content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
  const streamed = live ? [...live.flow.querySelectorAll(":scope > .text")].map(markdownOf).join("") : null;
  const nodes = (message.execution_tree && message.execution_tree.nodes) || [];
  if (live && streamed === said(message) && nodes.every((n) => state.cards.has(n.id))) {
    for (const node of nodes) finishCard(state.cards.get(node.id), { result: node.result_preview, isError: node.is_error, durationMs: node.duration_ms });
    for (const part of Array.isArray(message.content) ? message.content : []) {
      const media = part.type === "image_url" ? mediaView(part.image_url, "image/")
        : part.type === "audio_url" ? mediaView(part.audio_url, "audio/") : null;
      if (media) live.root.append(media);
    }
    live.root.dataset.id = message.id;
    addTraceButton(live.root, message.id);
    return;
  }
  const cost = live && live.root.querySelector(":scope > .cost");
  const sources = live && live.root.querySelector(":scope > .citations");
  const stored = renderStored(message, false);
  if (live && !stored.dataset.mode && live.root.dataset.mode) stored.dataset.mode = live.root.dataset.mode;
  if (live) { live.root.replaceWith(stored); if (sources) stored.append(sources); if (cost) stored.append(cost); }
  else $("messages").append(stored);
  state.live = { root: stored, flow: stored.querySelector(".flow"), text: null };
}

function ensureLive() {
  if (!state.live) { state.live = assistantMessage(); $("messages").append(state.live.root); }
}

function onToolUpdate(f) {
  ensureLive();
  if (f.status === "start") {
    if (state.cards.has(f.tool_call_id)) return;
    const card = toolCard({ id: f.tool_call_id, name: f.name, title: f.args && f.name === "run_subtask" ? f.args.title : undefined, args: shownArgs(f.name, f.args), depth: f.depth || 0 });
    state.cards.set(f.tool_call_id, card);
    const parent = f.parent_id ? state.cards.get(f.parent_id) : null;
    if (parent) parent.querySelector(":scope > .body > .children").append(card); else placeCard(state.live, card);
  } else {
    const card = state.cards.get(f.tool_call_id);
    if (card) finishCard(card, { result: f.result, isError: f.is_error, durationMs: f.metadata && f.metadata.execution_time_ms });
    if (KNOWLEDGE_TOOLS.includes(f.name) && !f.is_error) addCitations(f.result);
    if (card && !f.is_error) showImage(card, f.result);
  }
}

const KNOWLEDGE_TOOLS = ["query_collection", "search_collections"];

/// An asset URL the page can load (with the key, when there is one).
function assetSrc(url) {
  const key = new URLSearchParams(location.search).get("api_key") || localStorage.getItem("weft_api_key");
  return url.startsWith("/assets/") && key ? `${url}?api_key=${encodeURIComponent(key)}` : url;
}

/// An image (a screenshot, a generated image) or audio a tool produced, shown in its card.
function mediaView(url, mimeType) {
  if (mimeType.startsWith("image/")) return el("img", { class: "result-image", src: assetSrc(url), alt: "generated image" });
  if (mimeType.startsWith("audio/")) return el("audio", { class: "result-audio", src: assetSrc(url), controls: "" });
  return null;
}

/// A result with one file (`url`, `mime_type`) or several (`assets`, as MCP tools return them).
function showImage(card, result) {
  let value;
  try { value = JSON.parse(result); } catch { return; }
  if (!value || typeof value !== "object") return;
  const files = Array.isArray(value.assets) ? value.assets : [value];
  for (const file of files) {
    if (!file || typeof file.url !== "string") continue;
    const view = mediaView(file.url, String(file.mime_type || ""));
    if (view) card.querySelector(":scope > .body").append(view);
  }
}

/// Knowledge hits become the answer's numbered sources (deduplicated by document and text).
function addCitations(result) {
  let hits;
  try { hits = JSON.parse(result).hits; } catch { return; }
  if (!Array.isArray(hits) || !hits.length) return;
  state.citations = [...(state.citations || []), ...hits]
    .filter((h, i, all) => all.findIndex((o) => o.document === h.document && o.chunk === h.chunk) === i);
  const view = citationsView(state.citations);
  const shown = state.live.root.querySelector(":scope > .citations");
  if (shown) shown.replaceWith(view); else state.live.root.append(view);
}

/// A code run shows its code; other calls their arguments (an object, or stored JSON text).
function shownArgs(name, args) {
  if (name !== "code.execute" || !args) return args;
  if (typeof args === "object") return args.code;
  try { return JSON.parse(args).code; } catch { return args; }
}

function finishTurn() {
  setRunning(false);
  state.live = null;
  state.citations = [];
  state.approvals = [];
  renderApprovals();
  loadThreads();
}

function renderApprovals() {
  const [first, ...rest] = state.approvals;
  const shown = $("approvals").firstElementChild;
  if (first && shown && shown.dataset.id === first.tool_call_id) {
    // The same request stays on screen (no flicker, buttons stay put); only the count changes.
    shown.querySelector(".queued")?.remove();
    if (rest.length) shown.querySelector(".actions").append(el("span", { class: "queued", text: `+${rest.length} more pending` }));
    return;
  }
  $("approvals").replaceChildren(...(first ? [approvalCard(first, rest.length, decide)] : []));
}

function decide(toolCallId, decision) {
  socket.send({ type: "tool_approval_response", tool_call_id: toolCallId, decision });
  state.approvals = state.approvals.filter((a) => a.tool_call_id !== toolCallId);
  renderApprovals();
}

function onConnection(status) {
  if (status !== "up" && $("connection").textContent.startsWith("API key")) return;
  $("connection").textContent = status === "up" ? "connected" : "reconnecting…";
  $("connection").classList.toggle("up", status === "up");
  // The manifest belongs to the connection: every new socket gets it again.
  if (status === "up") socket.send(MANIFEST);
  if (status === "up" && state.running && state.threadId) {
    // Pick the running turn up where the dropped socket left it.
    socket.send({ command: "resume_chat", data: { thread_id: state.threadId, last_seq: state.lastSeq[state.threadId] || 0 } });
  }
}

// ---- composer and modes ----

function setRunning(running) {
  state.running = running;
  $("turn-status").textContent = running ? "working…" : "";
  $("send").disabled = running;
  $("send").hidden = running;
  $("stop").hidden = !running;
  showExchangeActions();
}

/// Stop the running turn on the server; what it produced so far is kept.
function stopTurn() {
  if (state.running && state.threadId) socket.stop(state.threadId);
}

/// The address of the chat on screen: `#/t/<id>` (a reload or a shared link opens it).
function showAddress(id) {
  const hash = id ? `#/t/${encodeURIComponent(id)}` : "";
  if (location.hash !== hash) history.pushState(null, "", `${location.pathname}${location.search}${hash}`);
}

/// The thread named by the address, if any.
function addressedThread() {
  const match = /^#\/t\/(.+)$/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

function setMode(mode, announce) {
  state.mode = mode;
  $("mode-label").textContent = MODES[mode];
  $("mode-button").dataset.mode = mode;
  for (const li of $("mode-menu").children) li.setAttribute("aria-selected", String(li.dataset.mode === mode));
  if (announce && state.threadId) socket.send({ command: "set_permission_mode", data: { thread_id: state.threadId, permission_mode: mode } });
}

function send(e) {
  e.preventDefault();
  if (sendText($("input").value.trim())) $("input").value = "";
}

/// Sends `text` as the user's next message; whether it went.
function sendText(text) {
  if (!text || state.running) return false;
  $("messages").append(userMessage(text));
  const data = { content: text, permission_mode: state.mode, agent: state.agent, mode: state.execMode };
  const context = chatContext();
  if (context) data.chat_context = context;
  startTurn(data);
  return true;
}

/// An answer's error, with a button asking again in its place (or, when the failed answer
/// was never stored, sending the message before it again).
function errorNotice(text) {
  const view = notice("error", text);
  const again = el("button", { type: "button", class: "retry", text: "Try again" });
  again.onclick = () => {
    const last = lastExchange();
    if (last) { resend(last, last.text); return; }
    const asked = [...$("messages").querySelectorAll(".message.user .text")].pop();
    if (asked && sendText(asked.textContent)) again.remove();
  };
  view.append(" ", again);
  return view;
}

// ---- regenerate and edit: the last exchange asked again, in its place ----

/// Answers these execution modes give can be asked for again (a workflow run or a generated
/// file is run again from its own panel).
const CHAT_MODES = new Set(["classic", "code"]);

/// The last exchange on screen when it can be asked again: the last user message, the
/// stored answer after it, and what was asked.
function lastExchange() {
  const shown = [...$("messages").children];
  const asked = shown.filter((n) => n.matches(".message.user")).pop();
  if (!asked) return null;
  const answer = shown.slice(shown.indexOf(asked)).find((n) => n.matches(".message.assistant"));
  if (!answer || !answer.dataset.id || !CHAT_MODES.has(answer.dataset.mode || "classic")) return null;
  const text = asked.querySelector(":scope > .text");
  return text ? { asked, answer, text: text.textContent } : null;
}

/// "Regenerate" under the last answer and "Edit" beside the last message, while no turn runs.
function showExchangeActions() {
  for (const action of $("messages").querySelectorAll(".exchange-action")) action.remove();
  const last = state.running ? null : lastExchange();
  if (!last) return;
  const regenerate = el("button", { type: "button", class: "exchange-action regenerate", text: "↻ Regenerate", "aria-label": "Regenerate this answer" });
  regenerate.onclick = () => resend(last, last.text);
  const trace = last.answer.querySelector(":scope > .trace-toggle");
  if (trace) trace.before(regenerate); else last.answer.append(regenerate);
  const edit = el("button", { type: "button", class: "exchange-action edit", text: "✎ Edit", "aria-label": "Edit your last message" });
  edit.onclick = () => editAsked(last);
  last.asked.append(edit);
}

/// Ask `text` in place of the last exchange: it and what followed leave the page, and the
/// server drops them with the new turn's start (`replaces`).
function resend(last, text) {
  if (!text || state.running) return false;
  const shown = [...$("messages").children];
  for (const node of shown.slice(shown.indexOf(last.asked))) node.remove();
  $("messages").append(userMessage(text));
  const data = { content: text, permission_mode: state.mode, agent: state.agent, mode: last.answer.dataset.mode || state.execMode, replaces: last.answer.dataset.id };
  const context = chatContext();
  if (context) data.chat_context = context;
  startTurn(data);
  return true;
}

/// Edit the last message in place: Enter (or Send) asks it again in place of the exchange;
/// Esc (or Cancel) keeps it as it was.
function editAsked(last) {
  const field = el("textarea", { class: "edit-field", rows: "3", "aria-label": "Edit your message" });
  field.value = last.text;
  const cancel = el("button", { type: "button", class: "edit-cancel", text: "Cancel" });
  const save = el("button", { type: "button", class: "edit-send", text: "Send" });
  const kept = [...last.asked.childNodes];
  last.asked.replaceChildren(el("div", { class: "edit-box" }, field, el("div", { class: "edit-actions" }, cancel, save)));
  field.focus();
  const keep = () => { last.asked.replaceChildren(...kept); showExchangeActions(); };
  save.onclick = () => resend(last, field.value.trim());
  cancel.onclick = keep;
  field.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); resend(last, field.value.trim()); }
    else if (e.key === "Escape") { e.preventDefault(); keep(); }
  });
}

function startTurn(data) {
  // A new chat gets its id here (the server creates the thread under it): its address and
  // the Stop button work before the turn's first frame.
  if (!state.threadId) { state.threadId = crypto.randomUUID(); showAddress(state.threadId); }
  data.thread_id = state.threadId;
  socket.send({ command: "chat_message", request_id: crypto.randomUUID ? crypto.randomUUID() : String(Date.now()), data });
  setRunning(true);
  scrollDown();
}

/// Route 1: run a saved workflow as a turn of the thread on screen.
function runWorkflow(workflow, params) {
  if (state.running) return;
  $("messages").append(userMessage(`Run workflow “${workflow.name}”`));
  startTurn({ content: `Run workflow ${workflow.name}`, workflow_target: "workflow", workflow_id: workflow.id, params, permission_mode: state.mode });
}

// An answer drawn as Markdown grows after its frame: the bottom is followed across that too.
aroundRender(() => atBottom(), (_node, follow) => { if (follow) scrollDown(); });

function scrollDown() { const m = $("messages"); m.scrollTop = m.scrollHeight; }

/// Whether the transcript is scrolled to (within a line of) its end.
function atBottom() { const m = $("messages"); return m.scrollHeight - m.scrollTop - m.clientHeight < 48; }

$("composer").addEventListener("submit", send);
$("input").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) send(e); });
$("new-thread").onclick = () => { showDrawer(false); newThread(); };
$("stop").onclick = stopTurn;
window.addEventListener("popstate", () => {
  const id = addressedThread();
  if (id !== state.threadId) (id ? openThread(id) : newThread());
});
$("agent-select").onchange = (e) => { state.agent = e.target.value; };
$("exec-mode").onchange = (e) => { state.execMode = e.target.value; };
// ---- the permission-mode menu: a listbox run by mouse or keyboard ----

function showModeMenu(show) {
  const menu = $("mode-menu");
  menu.hidden = !show;
  $("mode-button").setAttribute("aria-expanded", String(show));
  if (show) menu.querySelector("[aria-selected='true']")?.focus();
}

function pickMode(li) {
  setMode(li.dataset.mode, true);
  showModeMenu(false);
  $("mode-button").focus();
}

$("mode-button").onclick = () => showModeMenu($("mode-menu").hidden);
$("mode-button").addEventListener("keydown", (e) => {
  if (e.key === "ArrowDown" || e.key === "ArrowUp") { e.preventDefault(); showModeMenu(true); }
});
for (const li of $("mode-menu").children) li.onclick = () => pickMode(li);
$("mode-menu").addEventListener("keydown", (e) => {
  const items = [...$("mode-menu").children];
  const at = items.indexOf(document.activeElement);
  const move = { ArrowDown: 1, ArrowUp: -1 }[e.key];
  if (move) items[(at + move + items.length) % items.length].focus();
  else if (e.key === "Home") items[0].focus();
  else if (e.key === "End") items[items.length - 1].focus();
  else if ((e.key === "Enter" || e.key === " ") && at >= 0) pickMode(items[at]);
  else if (e.key === "Escape") { showModeMenu(false); $("mode-button").focus(); }
  else if (e.key === "Tab") showModeMenu(false);
  else return;
  e.preventDefault();
});
// A click anywhere else closes it.
document.addEventListener("pointerdown", (e) => {
  if (!$("mode-menu").hidden && !e.target.closest(".mode-picker")) showModeMenu(false);
});

// ---- the chat list as a drawer (narrow screens) ----

function showDrawer(show) {
  document.body.classList.toggle("drawer-open", show);
  $("menu-button").setAttribute("aria-expanded", String(show));
  if (show) ($("threads").querySelector("button") ?? $("new-thread")).focus();
}

$("menu-button").onclick = () => showDrawer(!document.body.classList.contains("drawer-open"));
$("backdrop").onclick = () => showDrawer(false);
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && document.body.classList.contains("drawer-open")) {
    showDrawer(false);
    $("menu-button").focus();
  }
});
setMode("default", false);
initWorkflows({ headers, run: runWorkflow });
if (addressedThread()) openThread(addressedThread()); else loadThreads();
loadAgents();
loadModes();
fetch("/healthz").then((r) => r.json()).then((h) => { $("demo-banner").hidden = !h.demo; }).catch(() => {});
window.weft = { state, socket, openThread };
