"""The connection to Weft: turns as async iterators of frames, approvals, stop, permission
modes, and reconnecting with ``resume_chat`` from the last ``seq`` seen."""

from __future__ import annotations

import asyncio
import json
import random
import re
import uuid
from typing import Any, AsyncIterator
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .view import TurnView

#: Close codes after which reconnecting cannot help: the key was revoked.
FINAL_CLOSE_CODES = {4001}


class WeftError(Exception):
    """A refusal from the server (its ``error.code``) or a turn the client could not follow
    (``connection_failed``, ``connection_lost``, ``connection_closed``, ``superseded``)."""

    def __init__(self, code: str, message: str, frame: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.frame = frame


def websocket_url(url: str) -> str:
    """The websocket address for a server's base URL (``http://host:8080``) or its ``/ws``."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def _snake(name: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), name)


class Turn:
    """One turn followed to its end: ``async for frame in turn``, ``await turn.message()``
    (the stored assistant message), ``turn.text`` and ``turn.view`` (the nested cards)."""

    def __init__(self, client: WeftClient, thread_id: str):
        self.client = client
        self.thread_id = thread_id
        self.request_id: str | None = None
        self.sent = False
        self.started = False
        self.finished = False
        self.view = TurnView()
        self.error: WeftError | None = None
        self.stored: dict | None = None
        self._frames: asyncio.Queue[dict | None] = asyncio.Queue()
        self._message: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

    @property
    def text(self) -> str:
        return self.view.text

    async def message(self) -> dict:
        return await asyncio.shield(self._message)

    async def stop(self) -> None:
        await self.client.stop(self.thread_id)

    async def __aiter__(self) -> AsyncIterator[dict]:
        while True:
            frame = await self._frames.get()
            if frame is None:
                if self.error and not self.stored:
                    raise self.error
                return
            yield frame

    def _receive(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind in ("turn_started", "turn_resumed"):
            self.started = True
        if kind == "message":
            self.stored = frame["message"]
        if kind == "error" and self.error is None:
            self.error = WeftError(frame["code"], frame["message"], frame)
        self.view.apply(frame)
        self._frames.put_nowait(frame)
        last = kind == "chunk" and frame.get("done") and not frame.get("parent_id")
        # An error about the command itself (no thread in the frame): the turn never started.
        if last or (kind == "error" and not frame.get("thread_id")):
            self._end()

    def _end(self) -> None:
        self.finished = True
        self.client._forget(self)
        if self.stored and (self.error is None or self.stored.get("status") != "running"):
            self._message.set_result(self.stored)
        else:
            self._message.set_exception(
                self.error or WeftError("internal", "the turn ended without its message"))
            self._message.exception()  # retrieved: a caller that only iterates sees it there
        self._frames.put_nowait(None)

    def _fail(self, error: WeftError) -> None:
        if self.finished:
            return
        self.finished = True
        self.client._forget(self)
        self.error = error
        self._message.set_exception(error)
        self._message.exception()
        self._frames.put_nowait(None)


class WeftClient:
    """``async with WeftClient("http://127.0.0.1:8080", api_key=…) as weft: …``"""

    def __init__(self, url: str, api_key: str | None = None, *,
                 backoff: tuple[float, float] = (0.25, 5.0)):
        self.url = websocket_url(url)
        self.api_key = api_key
        self.backoff = backoff
        self.last_seq: dict[str, int] = {}
        self.turns: dict[str, Turn] = {}
        self._requests: dict[str, Turn] = {}
        self._ws: ClientConnection | None = None
        self._queue: list[str] = []
        self._reader: asyncio.Task | None = None
        self._closed = False
        self._next_request = 1
        self.reconnects = 0

    async def __aenter__(self) -> WeftClient:
        await self.connect()
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection (raises ``WeftError("connection_failed")`` if it cannot)."""
        if self._reader is None:
            self._ws = await self._open()
            self._reader = asyncio.create_task(self._run())

    async def close(self) -> None:
        """Close for good; turns still followed end with ``connection_closed``."""
        self._closed = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self._fail_all(WeftError("connection_closed", "the client was closed"))

    def drop(self) -> None:
        """Lose the connection as a network would (it reconnects and resumes); for tests."""
        if self._ws is not None:
            self._ws.transport.abort()

    async def send(self, frame: dict) -> bool:
        """Send a raw client frame (queued while the connection is down)."""
        if frame.get("command") == "resume_chat":
            # A resume states what the caller has seen of the thread: frames after it are shown.
            self.last_seq[frame["data"]["thread_id"]] = frame["data"].get("last_seq", 0)
        body = json.dumps(frame)
        if self._ws is not None:
            try:
                await self._ws.send(body)
                return True
            except ConnectionClosed:
                pass
        self._queue.append(body)
        return False

    async def chat(self, content: str | list, **options: Any) -> Turn:
        """Send a chat message and follow its turn. Options are any other ``chat_message``
        field (``thread_id``, ``permission_mode``, ``mode``, ``agent``, ``provider``, …); a new
        chat gets a fresh thread id, known at once as ``turn.thread_id``."""
        data: dict[str, Any] = {"content": content}
        data.update({_snake(k): v for k, v in options.items() if v is not None})
        data.setdefault("thread_id", str(uuid.uuid4()))
        turn = self._follow(data["thread_id"])
        turn.request_id = f"r{self._next_request}"
        self._next_request += 1
        self._requests[turn.request_id] = turn
        await self.connect()
        turn.sent = await self.send(
            {"command": "chat_message", "request_id": turn.request_id, "data": data})
        return turn

    async def resume(self, thread_id: str, last_seq: int | None = None) -> Turn:
        """Follow a thread's running turn (or get its last answer) from ``last_seq``."""
        turn = self._follow(thread_id)
        turn.started = True
        await self.connect()
        seq = last_seq if last_seq is not None else self.last_seq.get(thread_id, 0)
        await self.send({"command": "resume_chat",
                         "data": {"thread_id": thread_id, "last_seq": seq}})
        return turn

    async def respond(self, tool_call_id: str, decision: str, reason: str | None = None) -> None:
        """Answer an approval: ``allow``, ``allow_for_chat`` or ``deny``."""
        frame = {"type": "tool_approval_response", "tool_call_id": tool_call_id,
                 "decision": decision}
        if reason is not None:
            frame["reason"] = reason
        await self.send(frame)

    async def allow(self, tool_call_id: str) -> None:
        await self.respond(tool_call_id, "allow")

    async def allow_for_chat(self, tool_call_id: str) -> None:
        await self.respond(tool_call_id, "allow_for_chat")

    async def deny(self, tool_call_id: str, reason: str | None = None) -> None:
        await self.respond(tool_call_id, "deny", reason)

    async def stop(self, thread_id: str) -> None:
        await self.send({"command": "stop", "data": {"thread_id": thread_id}})

    async def set_permission_mode(self, thread_id: str, permission_mode: str) -> None:
        await self.send({"command": "set_permission_mode",
                         "data": {"thread_id": thread_id, "permission_mode": permission_mode}})

    # ---- internals ----

    def _follow(self, thread_id: str) -> Turn:
        previous = self.turns.get(thread_id)
        if previous:
            previous._fail(WeftError("superseded", "another turn of this thread is followed now"))
        turn = Turn(self, thread_id)
        self.turns[thread_id] = turn
        return turn

    async def _open(self) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        try:
            return await connect(self.url, additional_headers=headers, max_size=None)
        except (OSError, InvalidHandshake, asyncio.TimeoutError) as e:
            raise WeftError("connection_failed", f"cannot connect to {self.url}: {e}") from e

    async def _run(self) -> None:
        """Read frames; when the connection goes, reconnect with backoff and resume."""
        delay = self.backoff[0]
        while not self._closed:
            ws = self._ws
            try:
                async for raw in ws:
                    self._receive(raw)
            except ConnectionClosed:
                pass
            code = ws.close_code
            if self._closed or code in FINAL_CLOSE_CODES:
                self._fail_all(WeftError("connection_closed", f"the connection closed ({code})"))
                return
            self._ws = None
            self._lost_connection()
            while not self._closed:
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff[1])
                try:
                    self._ws = await self._open()
                except WeftError:
                    continue
                delay = self.backoff[0]
                self.reconnects += 1
                await self._resume_all()
                break

    def _lost_connection(self) -> None:
        """A turn whose message may or may not have reached the server is refused."""
        for turn in list(self.turns.values()):
            if turn.sent and not turn.started:
                turn._fail(WeftError("connection_lost", "the connection closed before the turn "
                                     "started: it may or may not have started (resume the thread)"))

    async def _resume_all(self) -> None:
        for thread_id, turn in list(self.turns.items()):
            if turn.started:
                await self._ws.send(json.dumps({"command": "resume_chat", "data": {
                    "thread_id": thread_id, "last_seq": self.last_seq.get(thread_id, 0)}}))
        queued, self._queue = self._queue, []
        for body in queued:
            await self._ws.send(body)
        for turn in self.turns.values():
            turn.sent = True

    def _receive(self, raw: str | bytes) -> None:
        try:
            frame = json.loads(raw)
        except ValueError:
            return
        thread_id = frame.get("thread_id")
        seq = frame.get("seq")
        if thread_id and isinstance(seq, int):
            # A frame seen before a resume is not shown twice.
            if seq <= self.last_seq.get(thread_id, -1):
                return
            self.last_seq[thread_id] = seq
        turn = self.turns.get(thread_id) if thread_id else self._requests.get(frame.get("request_id"))
        if turn is not None:
            turn._receive(frame)

    def _forget(self, turn: Turn) -> None:
        """A turn that has ended is no longer followed."""
        if self.turns.get(turn.thread_id) is turn:
            del self.turns[turn.thread_id]
        self._requests.pop(turn.request_id, None)

    def _fail_all(self, error: WeftError) -> None:
        for turn in list(self.turns.values()):
            turn._fail(error)
