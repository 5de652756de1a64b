"""weft-client against a real `weft serve` (scripted provider, SQLite): streamed turns, nested
subtasks, approvals, stop, refusals, and turns that go on across a dropped socket and a killed
server without losing or repeating a frame."""

from __future__ import annotations

import asyncio
import runpy
import sys
from pathlib import Path

import pytest

from server import API_KEY, Server
from weft_client import WeftClient, WeftError, websocket_url


def chunks(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i} " for i in range(n)]


SLOW = chunks("s", 50)
SCRIPT = {"conversations": [
    {"match": "hello", "steps": [{"chunks": ["Hel", "lo ", "world"],
                                  "usage": {"input_tokens": 12, "output_tokens": 3}}]},
    {"match": "compare", "steps": [
        {"chunks": ["Let me look. "], "tool_calls": [
            {"name": "run_subtask", "arguments": {"title": "A", "instructions": "research A"}},
            {"name": "run_subtask", "arguments": {"title": "B", "instructions": "research B"}}]},
        {"chunks": ["A and B ", "differ."]}]},
    {"match": "research A", "steps": [{"text": "A is old."}]},
    {"match": "research B", "steps": [{"text": "B is new."}]},
    {"match": "note", "steps": [
        {"tool_calls": [{"name": "write_file",
                         "arguments": {"path": "notes.md", "content": "hi from python"}}]},
        {"text": "done writing"}]},
    {"match": "slow", "steps": [{"chunks": SLOW, "chunk_delay_ms": 25}]},
    {"match": "*", "steps": [{"text": "ok", "repeat": True}]},
]}


@pytest.fixture(scope="module")
def server():
    running = Server(SCRIPT)
    yield running
    running.stop()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def collect(turn, on_frame=None) -> list[dict]:
    frames = []
    async for frame in turn:
        frames.append(frame)
        if on_frame:
            await on_frame(frame)
    return frames


def root_text(frames: list[dict]) -> str:
    text = ""
    for f in frames:
        if f["type"] == "turn_resumed":
            text = f["content"]
        if f["type"] == "chunk" and not f.get("parent_id"):
            text += f["content"]
    return text


def assert_rising_seq(frames: list[dict]) -> None:
    seqs = [f["seq"] for f in frames if isinstance(f.get("seq"), int)]
    assert all(b > a for a, b in zip(seqs, seqs[1:])), seqs


def test_a_streamed_turn(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("hello there")
            frames = await collect(turn)
            message = await turn.message()
            assert frames[0]["type"] == "turn_started"
            assert frames[-1] == {**frames[-1], "type": "chunk", "done": True}
            # Text that reaches the server together goes out as one chunk.
            assert "".join(f["content"] for f in frames if f["type"] == "chunk") == "Hello world"
            assert message["content"] == "Hello world" and message["status"] == "completed"
            assert turn.text == "Hello world"
            assert turn.view.cost["input_tokens"] == 12
            assert all(f["thread_id"] == turn.thread_id for f in frames)
            assert_rising_seq(frames)
            first = await weft.chat("first of two")
            assert (await first.message())["content"] == "ok"
            again = await weft.chat("more", thread_id=first.thread_id)
            assert (await again.message())["content"] == "ok"
            assert again.thread_id == first.thread_id
    run(go())


def test_nested_subtasks_fold_into_cards(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("compare A and B", permission_mode="auto")
            await turn.message()
            items = turn.view.items
            assert [i.kind for i in items] == ["text", "tool", "tool", "text"]
            assert items[0].text == "Let me look. " and items[3].text == "A and B differ."
            assert [i.text for i in items[1].items] == ["A is old."]
            assert [i.text for i in items[2].items] == ["B is new."]
            assert items[1].status == "done" and items[1].name == "run_subtask"
    run(go())


def test_an_approval_allowed_writes_the_file(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("write a note", permission_mode="default")
            asked = []

            async def answer(frame):
                if frame["type"] == "tool_approval_request":
                    asked.append(frame)
                    assert [c.id for c in turn.view.pending_approvals] == [frame["tool_call_id"]]
                    await weft.allow(frame["tool_call_id"])
            await collect(turn, answer)
            assert asked[0]["name"] == "write_file" and asked[0]["category"] == "write"
            card = turn.view.cards[asked[0]["tool_call_id"]]
            assert card.approval["decision"] == "allow" and card.status == "done"
            assert (await turn.message())["content"] == "done writing"
        assert (server.workspace / "grace" / "notes.md").read_text() == "hi from python"
    run(go())


def test_an_approval_denied_with_a_reason(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("another note", permission_mode="default")

            async def answer(frame):
                if frame["type"] == "tool_approval_request":
                    await weft.deny(frame["tool_call_id"], "not today")
            await collect(turn, answer)
            card = next(iter(turn.view.cards.values()))
            assert card.approval["decision"] == "deny" and card.is_error
            assert "not today" in card.result
    run(go())


def test_stop_ends_the_turn_cancelled(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("slow story")

            async def stop(frame):
                if frame["type"] == "chunk" and "s5 " in frame["content"]:
                    await turn.stop()
            await collect(turn, stop)
            message = await turn.message()
            assert message["status"] == "cancelled"
            assert message["content"].startswith("s0 s1 s2 s3 s4 s5 ")
            assert len(message["content"]) < len("".join(SLOW))
    run(go())


def test_a_dropped_socket_resumes_without_loss_or_repeats(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY, backoff=(0.05, 0.5)) as weft:
            turn = await weft.chat("slow again")

            async def drop(frame):
                if frame["type"] == "chunk" and any(s in frame["content"] for s in ("s10 ", "s30 ")):
                    weft.drop()
            frames = await collect(turn, drop)
            assert weft.reconnects == 2
            assert_rising_seq(frames)
            assert root_text(frames) == "".join(SLOW)
            assert (await turn.message())["content"] == "".join(SLOW)
            assert sum(f["type"] == "turn_started" for f in frames) == 1
    run(go())


def test_a_killed_server_restarted_the_turn_goes_on():
    own = Server({"conversations": [{"match": "*", "steps": [
        {"chunks": chunks("k", 60), "chunk_delay_ms": 40}]}]})
    try:
        async def go():
            async with WeftClient(own.url, api_key=API_KEY, backoff=(0.05, 0.4)) as weft:
                turn = await weft.chat("long one")
                restart = []

                async def kill(frame):
                    if frame["type"] == "chunk" and "k10 " in frame["content"] and not restart:
                        restart.append(asyncio.create_task(asyncio.to_thread(own.restart_after_kill)))
                frames = await collect(turn, kill)
                await restart[0]
                assert sum(f["type"] == "turn_resumed" for f in frames) == 1
                assert_rising_seq(frames)
                message = await turn.message()
                assert message["status"] == "completed"
                assert message["content"] == "".join(chunks("k", 60))
                assert root_text(frames) == message["content"] == turn.text
        run(go())
    finally:
        own.stop()


def test_refusals_raise_with_the_servers_code(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft:
            turn = await weft.chat("hello", mode="no-such-mode")
            with pytest.raises(WeftError) as refused:
                await turn.message()
            assert refused.value.code == "unknown_mode"
            with pytest.raises(WeftError):
                await collect(turn)
    run(go())


def test_a_wrong_key_cannot_connect(server):
    async def go():
        with pytest.raises(WeftError) as failed:
            await WeftClient(server.url, api_key="wrong").connect()
        assert failed.value.code == "connection_failed"
    run(go())


def test_resume_follows_a_running_turn_from_another_client(server):
    async def go():
        async with WeftClient(server.url, api_key=API_KEY) as weft, \
                WeftClient(server.url, api_key=API_KEY) as other:
            turn = await weft.chat("slow third")
            async for frame in turn:
                if frame["type"] == "chunk" and "s3 " in frame["content"]:
                    break
            follower = await other.resume(turn.thread_id)
            assert (await follower.message())["content"] == "".join(SLOW)
            assert follower.text == "".join(SLOW)
    run(go())


def test_the_example_runs_a_turn_and_answers_its_approval(server, capsys):
    example = Path(__file__).resolve().parents[1] / "examples" / "approve.py"
    sys.argv = [str(example), server.url, API_KEY]
    runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "[write_file asks:" in out and "allowing" in out
    assert "done writing" in out and "completed · thread " in out


def test_websocket_url():
    assert websocket_url("http://h:8080") == "ws://h:8080/ws"
    assert websocket_url("http://h:8080/ws") == "ws://h:8080/ws"
    assert websocket_url("https://h/weft/") == "wss://h/weft/ws"
