"""Run one turn and answer its approval: `python examples/approve.py http://127.0.0.1:8080 KEY`."""

import asyncio
import sys

from weft_client import WeftClient


async def main(url: str, api_key: str | None) -> None:
    async with WeftClient(url, api_key=api_key) as weft:
        turn = await weft.chat("write a short note to notes.md", permission_mode="default")
        async for frame in turn:
            if frame["type"] == "chunk" and not frame.get("parent_id"):
                print(frame["content"], end="", flush=True)
            elif frame["type"] == "tool_approval_request":
                print(f"\n[{frame['name']} asks: {frame['args']}] allowing")
                await weft.allow(frame["tool_call_id"])
        message = await turn.message()
        print(f"\n{message['status']} · thread {turn.thread_id}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080",
                     sys.argv[2] if len(sys.argv) > 2 else None))
