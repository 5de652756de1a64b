// @weft/client against a real `weft serve` (scripted provider, SQLite): streamed turns,
// nested subtasks, approvals, stop, permission modes, refusals, MessagePack, and turns that
// go on across a dropped socket and a killed server without losing or repeating a frame.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { encode, decode } from "@msgpack/msgpack";
import { WeftClient, WeftError } from "../weft-client.js";
import { Server, API_KEY } from "./server.js";

const slowChunks = (prefix, n) => Array.from({ length: n }, (_, i) => `${prefix}${i} `);
const SLOW = slowChunks("s", 60);

const SCRIPT = {
  conversations: [
    { match: "hello", steps: [{ chunks: ["Hel", "lo ", "world"], usage: { input_tokens: 12, output_tokens: 3 } }] },
    { match: "compare", steps: [
      { chunks: ["Let me look. "], tool_calls: [
        { name: "run_subtask", arguments: { title: "A", instructions: "research A" } },
        { name: "run_subtask", arguments: { title: "B", instructions: "research B" } }] },
      { chunks: ["A and B ", "differ."] }] },
    { match: "research A", steps: [{ text: "A is old." }] },
    { match: "research B", steps: [{ text: "B is new." }] },
    { match: "write", steps: [
      { tool_calls: [{ name: "write_file", arguments: { path: "notes.md", content: "hi from ts" } }] },
      { text: "done writing" }] },
    { match: "slow", steps: [{ chunks: SLOW, chunk_delay_ms: 25 }] },
    { match: "*", steps: [{ text: "ok", repeat: true }] },
  ],
};

let server;
before(async () => { server = await Server.start(SCRIPT); });
after(async () => { await server?.stop(); });

function client(options = {}) {
  return new WeftClient({ url: server.url, apiKey: API_KEY, backoff: { initialMs: 50, maxMs: 500 }, ...options });
}

/** Every frame of a turn, in order. */
async function collect(turn, onFrame = () => {}) {
  const frames = [];
  for await (const frame of turn) {
    frames.push(frame);
    onFrame(frame, frames);
  }
  return frames;
}

/** The root text a client showing these frames shows (`turn_resumed` replaces it). */
function rootText(frames) {
  let text = "";
  for (const f of frames) {
    if (f.type === "turn_resumed") text = f.content;
    if (f.type === "chunk" && !f.parent_id) text += f.content;
  }
  return text;
}

function assertRisingSeq(frames) {
  const seqs = frames.filter((f) => typeof f.seq === "number").map((f) => f.seq);
  for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i] > seqs[i - 1], `seq ${seqs[i]} after ${seqs[i - 1]}`);
}

test("a streamed turn: frames in order, the text, the stored message", async () => {
  const weft = client();
  const turn = weft.chat("hello there");
  const frames = await collect(turn);
  const message = await turn.message;
  assert.equal(frames[0].type, "turn_started");
  assert.equal(frames.at(-1).type, "chunk");
  assert.equal(frames.at(-1).done, true);
  // Text that reaches the server together goes out as one chunk.
  assert.equal(frames.filter((f) => f.type === "chunk").map((f) => f.content).join(""), "Hello world");
  assert.equal(message.content, "Hello world");
  assert.equal(message.status, "completed");
  assert.equal(turn.text, "Hello world");
  assert.equal(turn.view.cost.input_tokens, 12);
  assert.ok(frames.every((f) => f.thread_id === turn.threadId));
  assertRisingSeq(frames);
  // The thread id the client chose is the thread's.
  const threads = await (await fetch(`${server.url}/threads`, { headers: { Authorization: `Bearer ${API_KEY}` } })).json();
  assert.ok(threads.some((t) => t.id === turn.threadId));
  weft.close();
});

test("a second message goes to the same thread", async () => {
  const weft = client();
  const first = weft.chat("first of two");
  assert.equal((await first.message).content, "ok");
  const second = weft.chat("anything else", { threadId: first.threadId });
  assert.equal((await second.message).content, "ok");
  assert.equal(second.threadId, first.threadId);
  weft.close();
});

test("nested subtasks fold into cards under their calls, in the order they happened", async () => {
  const weft = client();
  const turn = weft.chat("compare A and B", { permissionMode: "auto" });
  await turn.message;
  const { items } = turn.view;
  assert.deepEqual(items.map((i) => i.kind), ["text", "tool", "tool", "text"]);
  assert.equal(items[0].text, "Let me look. ");
  assert.equal(items[3].text, "A and B differ.");
  const [a, b] = [items[1], items[2]];
  assert.equal(a.name, "run_subtask");
  assert.equal(a.status, "done");
  assert.deepEqual(a.items.map((i) => i.text), ["A is old."]);
  assert.deepEqual(b.items.map((i) => i.text), ["B is new."]);
  assert.equal(turn.text, "Let me look. A and B differ.");
  weft.close();
});

test("an approval: asked, allowed, the file written", async () => {
  const weft = client();
  const turn = weft.chat("write a note", { permissionMode: "default" });
  let asked = null;
  await collect(turn, (f) => {
    if (f.type === "tool_approval_request") {
      asked = f;
      assert.deepEqual(turn.view.pendingApprovals.map((c) => c.id), [f.tool_call_id]);
      weft.allow(f.tool_call_id);
    }
  });
  assert.equal(asked.name, "write_file");
  assert.equal(asked.category, "write");
  const card = turn.view.cards.get(asked.tool_call_id);
  assert.equal(card.approval.decision, "allow");
  assert.equal(card.status, "done");
  assert.equal((await turn.message).content, "done writing");
  assert.equal(readFileSync(join(server.workspace, "ada", "notes.md"), "utf8"), "hi from ts");
  weft.close();
});

test("an approval denied with a reason: the model is told", async () => {
  const weft = client();
  const turn = weft.chat("write again", { permissionMode: "default" });
  await collect(turn, (f) => {
    if (f.type === "tool_approval_request") weft.deny(f.tool_call_id, "not today");
  });
  const card = [...turn.view.cards.values()][0];
  assert.equal(card.approval.decision, "deny");
  assert.equal(card.isError, true);
  assert.match(card.result, /not today/);
  weft.close();
});

test("switching the thread to auto releases a pending approval", async () => {
  const weft = client();
  const turn = weft.chat("write in auto", { permissionMode: "default" });
  await collect(turn, (f) => {
    if (f.type === "tool_approval_request") weft.setPermissionMode(turn.threadId, "auto");
  });
  const card = [...turn.view.cards.values()][0];
  assert.equal(card.approval.decision, "allow");
  assert.equal((await turn.message).status, "completed");
  weft.close();
});

test("stop: the turn ends cancelled, keeping what it said", async () => {
  const weft = client();
  const turn = weft.chat("slow story");
  let stopped = false;
  await collect(turn, (f) => {
    if (f.type === "chunk" && f.content.includes("s5 ") && !stopped) {
      stopped = true;
      turn.stop();
    }
  });
  const message = await turn.message;
  assert.equal(message.status, "cancelled");
  assert.ok(message.content.startsWith("s0 s1 s2 s3 s4 s5 "));
  assert.ok(message.content.length < SLOW.join("").length);
  weft.close();
});

test("a dropped socket: the turn goes on from the last seq, nothing lost or repeated", async () => {
  const weft = client();
  const states = [];
  weft.onState((s) => states.push(s));
  const turn = weft.chat("slow again");
  let drops = 0;
  const frames = await collect(turn, (f) => {
    if (f.type === "chunk" && (f.content.includes("s10 ") || f.content.includes("s30 "))) {
      drops++;
      weft.drop();
    }
  });
  assert.equal(drops, 2);
  assert.ok(states.filter((s) => s === "reconnecting").length >= 2, states.join(","));
  assertRisingSeq(frames);
  assert.equal(rootText(frames), SLOW.join(""));
  assert.equal((await turn.message).content, SLOW.join(""));
  assert.equal(frames.filter((f) => f.type === "turn_started").length, 1);
  weft.close();
});

test("a killed server: the client reconnects with backoff and the restarted server's turn goes on", async () => {
  const own = await Server.start({ conversations: [{ match: "*", steps: [{ chunks: slowChunks("k", 80), chunk_delay_ms: 40 }] }] });
  try {
    const weft = new WeftClient({ url: own.url, apiKey: API_KEY, backoff: { initialMs: 50, maxMs: 400 } });
    const turn = weft.chat("long one");
    let killed = false;
    const frames = await collect(turn, (f) => {
      if (f.type === "chunk" && f.content.includes("k15 ") && !killed) {
        killed = true;
        own.restartAfterKill();
      }
    });
    assert.ok(killed);
    assert.equal(frames.filter((f) => f.type === "turn_resumed").length, 1);
    assertRisingSeq(frames);
    const message = await turn.message;
    assert.equal(message.status, "completed");
    assert.equal(message.content, slowChunks("k", 80).join(""));
    assert.equal(rootText(frames), message.content);
    assert.equal(turn.text, message.content);
    weft.close();
  } finally {
    await own.stop();
  }
});

test("a deploy (SIGTERM, close 1012): the client reconnects to the next server and gets the whole answer", async () => {
  const own = await Server.start({ conversations: [{ match: "*", steps: [{ chunks: slowChunks("d", 30), chunk_delay_ms: 20 }] }] });
  try {
    const weft = new WeftClient({ url: own.url, apiKey: API_KEY, backoff: { initialMs: 50, maxMs: 400 } });
    const closes = [];
    const turn = weft.chat("deploy now");
    let restarting = null;
    const frames = await collect(turn, (f) => {
      if (f.type === "chunk" && f.content.includes("d5 ") && !restarting) {
        const ws = weft.ws;
        ws.addEventListener("close", (e) => closes.push(e.code));
        restarting = own.restartAfterTerm();
      }
    });
    await restarting;
    assert.deepEqual(closes, [1012]);
    assertRisingSeq(frames);
    const message = await turn.message;
    assert.equal(message.status, "completed");
    assert.equal(message.content, slowChunks("d", 30).join(""));
    assert.equal(turn.text, message.content);
    weft.close();
  } finally {
    await own.stop();
  }
});

test("resume: a second client follows a running turn and gets the same answer", async () => {
  const weft = client();
  const turn = weft.chat("slow third");
  const other = client();
  let follower = null;
  for await (const f of turn) {
    if (f.type === "chunk" && f.content.includes("s3 ")) {
      follower = other.resume(turn.threadId);
      break;
    }
  }
  const message = await follower.message;
  assert.equal(message.content, SLOW.join(""));
  assert.equal(follower.text, SLOW.join(""));
  // A turn that already ended answers with its stored message.
  const late = client();
  assert.equal((await late.resume(turn.threadId).message).content, SLOW.join(""));
  for (const c of [weft, other, late]) c.close();
});

test("refusals reject the turn with the server's code", async () => {
  const weft = client();
  const turn = weft.chat("hello", { mode: "no-such-mode" });
  await assert.rejects(turn.message, (e) => e instanceof WeftError && e.code === "unknown_mode");
  await assert.rejects(collect(turn), (e) => e.code === "unknown_mode");
  weft.close();
});

test("a wrong key: connect() fails and so does the turn", async () => {
  const weft = new WeftClient({ url: server.url, apiKey: "wrong" });
  const turn = weft.chat("hello");
  await assert.rejects(weft.connect(), (e) => e.code === "connection_failed");
  await assert.rejects(turn.message, (e) => e.code === "connection_failed");
});

test("MessagePack frames, both ways", async () => {
  const weft = client({ codec: { encode, decode } });
  let binary = 0;
  weft.onFrame(() => binary++);
  const turn = weft.chat("hello msgpack");
  assert.equal((await turn.message).content, "Hello world");
  assert.ok(binary > 3);
  assert.equal(weft.ws.binaryType, "arraybuffer");
  weft.close();
});

test("the websocket address from a base URL or from /ws", async () => {
  const { websocketUrl } = await import("../weft-client.js");
  assert.equal(websocketUrl("http://h:8080"), "ws://h:8080/ws");
  assert.equal(websocketUrl("http://h:8080/"), "ws://h:8080/ws");
  assert.equal(websocketUrl("ws://h:8080/ws"), "ws://h:8080/ws");
  assert.equal(websocketUrl("https://h/weft/", "k y"), "wss://h/weft/ws?api_key=k+y");
});
