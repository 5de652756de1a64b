// The workflows panel: saved workflows, a graph drawn as a left-to-right diagram, editing by
// hand (add, set, connect and remove nodes), a run form whose run streams node states onto
// the diagram, and the editor — where the chat's `chat_context` is `editor` and the page
// runs the agent's `ui_*` tools on the open graph.

import { el } from "./render.js";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

const wf = {
  list: [],             // the user's saved workflows
  current: null,        // the saved workflow on screen ({id, name, graph}), or null
  graph: { nodes: [], edges: [] }, // the graph on screen (edited in place)
  statuses: {},         // node id → running | completed | failed | skipped
  job: null,            // the run whose node states are shown
  editing: false,       // the chat drives the open graph (editor context)
  types: new Map(),     // node type → its catalogue entry (ports as JSON Schema)
};

let deps = { headers: () => ({}), run: () => {} };

/// The tools this page runs for the agent (sent as the connection's manifest).
export const MANIFEST = {
  type: "client_tools_manifest",
  tools: [
    { name: "ui_get_graph", description: "The graph open in the editor: {nodes, edges}.", category: "read",
      parameters: { type: "object", properties: {} } },
    { name: "ui_add_node", description: "Add a node to the open graph; returns its id.",
      parameters: { type: "object", properties: { id: { type: "string" }, type: { type: "string" }, inputs: { type: "object" } }, required: ["type"] } },
    { name: "ui_connect_nodes", description: "Connect an output port of one node to an input port of another.",
      parameters: { type: "object", properties: { from: { type: "string" }, output: { type: "string" }, to: { type: "string" }, input: { type: "string" } }, required: ["from", "output", "to", "input"] } },
    { name: "ui_paste_graph", description: "Replace the open graph with this one (for example build_workflow's result).",
      parameters: { type: "object", properties: { graph: { type: "object" } }, required: ["graph"] } },
  ],
};

export function initWorkflows(options) {
  deps = options;
  $("workflows-toggle").onclick = () => showPanel($("workflow-panel").hidden);
  $("workflow-close").onclick = () => showPanel(false);
  $("workflow-new").onclick = () => { open(null); $("graph-editor").open = true; $("workflow-name").focus(); };
  $("editor-toggle").onchange = (e) => { wf.editing = e.target.checked; document.body.classList.toggle("editing", wf.editing); };
  $("save-workflow").onclick = save;
  $("run-form").onsubmit = run;
  $("add-node").onclick = () => addNode($("node-type").value);
  $("add-edge").onclick = addEdge;
  draw();
}

function showPanel(show) {
  $("workflow-panel").hidden = !show;
  document.body.classList.toggle("with-panel", show);
  if (show) { loadList(); loadTypes(); }
}

/// The node catalogue, for adding nodes and knowing their ports.
async function loadTypes() {
  if (wf.types.size) return;
  const res = await fetch("/node-types", { headers: deps.headers() });
  if (!res.ok) return;
  for (const entry of await res.json()) wf.types.set(entry.type, entry);
  $("node-type").replaceChildren(...[...wf.types.keys()].sort().map((t) => el("option", { value: t, text: t })));
  drawEditor();
}

/// The chat context of the next message.
export function chatContext() {
  return wf.editing ? { kind: "editor", workflow_id: wf.current ? wf.current.id : null } : undefined;
}

async function loadList() {
  const res = await fetch("/workflows", { headers: deps.headers() });
  if (!res.ok) { status(res.status === 404 ? "Workflows are disabled on this server." : `cannot list workflows (${res.status})`); return; }
  wf.list = await res.json();
  $("workflow-list").replaceChildren(...wf.list.map((w) => {
    const li = el("li", { "data-id": w.id, text: w.name });
    if (wf.current && wf.current.id === w.id) li.classList.add("current");
    li.onclick = () => openSaved(w.id);
    return li;
  }));
}

async function openSaved(id) {
  const res = await fetch(`/workflows/${encodeURIComponent(id)}`, { headers: deps.headers() });
  if (!res.ok) { status(`cannot open the workflow (${res.status})`); return; }
  open(await res.json());
}

function open(saved) {
  wf.current = saved ? { id: saved.id, name: saved.name } : null;
  wf.graph = saved ? structuredClone(saved.graph) : { nodes: [], edges: [] };
  wf.statuses = {};
  wf.job = null;
  $("workflow-name").value = saved ? saved.name : "";
  status("");
  draw();
  loadList();
}

function status(text, kind) {
  const line = $("workflow-status");
  line.textContent = text;
  line.dataset.kind = kind || "";
}

// ---- the diagram ----

/// Columns by longest path from a source; rows in order of appearance.
function layout(graph) {
  const column = {};
  for (const n of graph.nodes) column[n.id] = 0;
  for (let pass = 0; pass < graph.nodes.length; pass++) {
    let moved = false;
    for (const e of graph.edges) {
      if (column[e.from] === undefined || column[e.to] === undefined) continue;
      if (column[e.to] < column[e.from] + 1) { column[e.to] = column[e.from] + 1; moved = true; }
    }
    if (!moved) break;
  }
  const rows = {};
  const at = {};
  for (const n of graph.nodes) {
    const c = column[n.id];
    rows[c] = (rows[c] || 0) + 1;
    at[n.id] = { x: 16 + c * 230, y: 16 + (rows[c] - 1) * 86 };
  }
  return at;
}

function draw() {
  const graph = wf.graph;
  const at = layout(graph);
  const width = Math.max(360, ...Object.values(at).map((p) => p.x + 176));
  const height = Math.max(120, ...Object.values(at).map((p) => p.y + 70));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  // At its natural size, so its text stays readable: a wide graph scrolls in its box.
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `Workflow graph: ${graph.nodes.length} nodes, ${graph.edges.length} edges`);
  for (const e of graph.edges) {
    const a = at[e.from], b = at[e.to];
    if (!a || !b) continue;
    const x1 = a.x + 160, y1 = a.y + 27, x2 = b.x, y2 = b.y + 27;
    const path = svgEl("path", { class: "edge", d: `M${x1},${y1} C${x1 + 30},${y1} ${x2 - 30},${y2} ${x2},${y2}`, "data-from": e.from, "data-to": e.to });
    path.append(svgEl("title", {}, `${e.from}.${e.output} → ${e.to}.${e.input}`));
    svg.append(path, svgEl("text", { class: "port", x: x2 - 4, y: y2 - 5, "text-anchor": "end" }, e.input));
  }
  for (const n of graph.nodes) {
    const p = at[n.id];
    const g = svgEl("g", { class: "node", "data-id": n.id, "data-status": wf.statuses[n.id] || "idle", transform: `translate(${p.x},${p.y})` });
    g.append(
      svgEl("rect", { width: 160, height: 54, rx: 8 }),
      svgEl("text", { class: "node-id", x: 10, y: 21 }, n.id),
      svgEl("text", { class: "node-type", x: 10, y: 40 }, n.type),
      svgEl("title", {}, `${n.id} (${n.type})${wf.statuses[n.id] ? `: ${wf.statuses[n.id]}` : ""}`),
    );
    svg.append(g);
  }
  const empty = graph.nodes.length === 0
    ? el("p", { class: "graph-empty", text: wf.editing ? "Empty graph: ask the agent to build one, or add nodes by hand below." : "No graph open. Pick a workflow, add nodes by hand below, or turn on the editor and ask the agent." })
    : null;
  $("graph-view").replaceChildren(...(empty ? [empty] : [svg]));
  drawParams();
  drawEditor();
}

// ---- editing by hand ----

/// A node type's port names: its `inputs` or `outputs` schema's properties.
function ports(type, side) {
  const schema = wf.types.get(type)?.[side];
  return Object.keys((schema && schema.properties) || {});
}

function addNode(type) {
  if (!type) return;
  CLIENT_TOOLS.ui_add_node({ type, id: `${type.split(".").pop().replace(/[^A-Za-z0-9_-]/g, "_")}_${wf.graph.nodes.length + 1}` });
  draw();
}

function removeNode(id) {
  wf.graph.nodes = wf.graph.nodes.filter((n) => n.id !== id);
  wf.graph.edges = wf.graph.edges.filter((e) => e.from !== id && e.to !== id);
  draw();
}

function addEdge() {
  const [from, output] = $("edge-from").value.split("\u0000");
  const [to, input] = $("edge-to").value.split("\u0000");
  if (!from || !to || from === to) return;
  if (wf.graph.edges.some((e) => e.to === to && e.input === input)) wf.graph.edges = wf.graph.edges.filter((e) => !(e.to === to && e.input === input));
  CLIENT_TOOLS.ui_connect_nodes({ from, output, to, input });
  draw();
}

/// A value typed for an input port, as its schema's type wants it.
function typed(type, port, text) {
  const kind = wf.types.get(type)?.inputs?.properties?.[port]?.type;
  if (kind === "string" || text === "") return text;
  try { return JSON.parse(text); } catch { return text; }
}

/// The node list (each with its unconnected inputs as fields) and the connection list.
function drawEditor() {
  const graph = wf.graph;
  $("node-list").replaceChildren(...graph.nodes.map((n) => {
    const remove = el("button", { type: "button", class: "remove", "aria-label": `Remove node ${n.id}`, text: "Remove" });
    remove.onclick = () => removeNode(n.id);
    const fields = ports(n.type, "inputs")
      .filter((port) => !graph.edges.some((e) => e.to === n.id && e.input === port))
      .map((port) => {
        const value = n.inputs?.[port];
        const field = el("input", { "data-node": n.id, "data-port": port, "aria-label": `${n.id} ${port}` });
        field.value = value === undefined ? "" : typeof value === "string" ? value : JSON.stringify(value);
        field.onchange = () => {
          n.inputs = n.inputs || {};
          if (field.value === "") delete n.inputs[port]; else n.inputs[port] = typed(n.type, port, field.value);
          draw();
        };
        return el("label", { class: "port-field" }, el("span", { text: port }), field);
      });
    return el("li", { "data-id": n.id },
      el("div", { class: "editor-row" }, el("b", { text: n.id }), el("code", { text: n.type }), remove), ...fields);
  }));
  const end = (side) => graph.nodes.flatMap((n) => ports(n.type, side).map((port) =>
    el("option", { value: `${n.id}\u0000${port}`, text: `${n.id}.${port}` })));
  const keep = (id, options) => { const was = $(id).value; $(id).replaceChildren(...options); if ([...$(id).options].some((o) => o.value === was)) $(id).value = was; };
  keep("edge-from", end("outputs"));
  keep("edge-to", end("inputs"));
  $("edge-list").replaceChildren(...graph.edges.map((e, i) => {
    const remove = el("button", { type: "button", class: "remove", "aria-label": `Remove ${e.from}.${e.output} to ${e.to}.${e.input}`, text: "Remove" });
    remove.onclick = () => { graph.edges.splice(i, 1); draw(); };
    return el("li", {}, el("div", { class: "editor-row" }, el("span", { text: `${e.from}.${e.output} → ${e.to}.${e.input}` }), remove));
  }));
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

/// One field per `input.*` node (its `name` input is the parameter).
function drawParams() {
  const inputs = wf.graph.nodes.filter((n) => n.type.startsWith("input."));
  const typed = Object.fromEntries([...$("run-params").querySelectorAll("input")].map((i) => [i.name, i.value]));
  const fields = inputs.map((n) => {
    const name = (n.inputs && n.inputs.name) || n.id;
    const input = el("input", { name, "data-kind": n.type, placeholder: n.type.slice(6) });
    input.value = typed[name] || "";
    return el("label", { class: "param" }, el("span", { text: name }), input);
  });
  $("run-params").replaceChildren(...fields);
  $("run-workflow").disabled = !wf.current;
  $("run-workflow").title = wf.current ? "" : "Save the workflow first";
}

// ---- runs ----

function run(e) {
  e.preventDefault();
  if (!wf.current) return;
  const params = {};
  for (const input of $("run-params").querySelectorAll("input")) {
    const kind = input.dataset.kind;
    let value = input.value;
    if (kind === "input.number") value = Number(value);
    if (kind === "input.json") { try { value = JSON.parse(value); } catch { status(`${input.name}: not JSON`, "error"); return; } }
    params[input.name] = value;
  }
  wf.statuses = {};
  wf.job = null;
  draw();
  deps.run(wf.current, params);
}

/// `job_update` / `node_update` frames: node states on the diagram, the job's outcome below.
export function onWorkflowFrame(f) {
  if (f.type === "job_update") {
    if (f.status === "running") { wf.job = f.job_id; status(`running ${f.workflow_id}…`); }
    else if (f.job_id === wf.job) status(f.error ? `${f.status}: ${f.error}` : f.status, f.status === "completed" ? "ok" : "error");
    return;
  }
  if (f.type === "node_update" && (!wf.job || f.job_id === wf.job)) {
    wf.statuses[f.node_id] = f.status;
    const g = document.querySelector(`#graph-view g.node[data-id="${CSS.escape(f.node_id)}"]`);
    if (g) g.dataset.status = f.status; else draw();
  }
}

// ---- the editor: saving, and the agent's ui_* tools ----

async function save() {
  const name = $("workflow-name").value.trim() || "Untitled workflow";
  const body = JSON.stringify({ name, graph: wf.graph });
  const headers = { ...deps.headers(), "Content-Type": "application/json" };
  const res = wf.current
    ? await fetch(`/workflows/${encodeURIComponent(wf.current.id)}`, { method: "PUT", headers, body })
    : await fetch("/workflows", { method: "POST", headers, body });
  const answer = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = answer.error || {};
    status(`not saved: ${err.message || res.status}${err.node ? ` (node ${err.node}${err.port ? `, port ${err.port}` : ""})` : ""}`, "error");
    return;
  }
  wf.current = { id: answer.id, name: answer.name };
  $("workflow-name").value = answer.name;
  status(`saved as ${answer.name}`, "ok");
  draw();
  loadList();
}

/// Run one `ui_*` call on the open graph: `{ok, result}` or `{ok: false, error}`.
export function runClientTool(name, args) {
  try {
    const result = CLIENT_TOOLS[name] ? CLIENT_TOOLS[name](args || {}) : fail(`this page has no tool ${name}`);
    showPanel(true);
    draw();
    return { ok: true, result };
  } catch (err) {
    return { ok: false, error: String(err.message || err) };
  }
}

function fail(message) { throw new Error(message); }

const CLIENT_TOOLS = {
  ui_get_graph: () => wf.graph,
  ui_add_node: ({ id, type, inputs }) => {
    if (typeof type !== "string" || !type) fail("`type` is required");
    let nodeId = id;
    for (let i = wf.graph.nodes.length + 1; !nodeId || wf.graph.nodes.some((n) => n.id === nodeId); i++) nodeId = `n${i}`;
    wf.graph.nodes.push({ id: nodeId, type, inputs: inputs || {} });
    return { node_id: nodeId };
  },
  ui_connect_nodes: ({ from, output, to, input }) => {
    for (const id of [from, to]) if (!wf.graph.nodes.some((n) => n.id === id)) fail(`no node ${id} in the open graph`);
    wf.graph.edges.push({ from, output, to, input });
    return { edges: wf.graph.edges.length };
  },
  ui_paste_graph: ({ graph }) => {
    const g = typeof graph === "string" ? JSON.parse(graph) : graph;
    if (!g || !Array.isArray(g.nodes)) fail("`graph` needs a `nodes` array");
    wf.graph = { nodes: g.nodes, edges: Array.isArray(g.edges) ? g.edges : [] };
    wf.statuses = {};
    return { nodes: wf.graph.nodes.length, edges: wf.graph.edges.length };
  },
};

export const workflows = wf;
