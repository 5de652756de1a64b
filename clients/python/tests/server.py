"""A real `weft serve` for the tests: the scripted provider, embedded SQLite in a temporary
directory, an API key, a free port. `WEFT_BIN` names the binary (default: the workspace's
debug build)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

API_KEY = "py-client-key"
BIN = os.environ.get("WEFT_BIN") or str(Path(__file__).resolve().parents[3] / "target/debug/weft")


class Server:
    def __init__(self, script: dict):
        self.dir = Path(tempfile.mkdtemp(prefix="weft-py-"))
        (self.dir / "script.json").write_text(json.dumps(script))
        (self.dir / "weft.toml").write_text(
            "[limits]\nturns_per_user = 0\nmessages_per_minute = 0\n")
        self.addr = None
        self.spawn("127.0.0.1:0")

    @property
    def url(self) -> str:
        return f"http://{self.addr}"

    @property
    def workspace(self) -> Path:
        return self.dir / "workspace"

    def spawn(self, bind: str) -> None:
        env = dict(os.environ,
                   WEFT_SCRIPT=str(self.dir / "script.json"),
                   WEFT_DATABASE_URL=f"sqlite://{self.dir / 'weft.db'}",
                   WEFT_WORKSPACE=str(self.workspace),
                   WEFT_API_KEYS=f"{API_KEY}:grace",
                   RUST_LOG=os.environ.get("WEFT_TEST_LOG", "info"),
                   NO_COLOR="1")
        self.process = subprocess.Popen(
            [BIN, "serve", "--bind", bind, "--config", str(self.dir / "weft.toml")],
            cwd=self.dir, env=env, stdout=subprocess.PIPE,
            stderr=None if os.environ.get("WEFT_TEST_LOG") else subprocess.DEVNULL, text=True)
        for line in self.process.stdout:
            match = re.search(r"listening on (\S+)", line)
            if match:
                self.addr = match.group(1)
                break
        else:
            raise RuntimeError("weft serve exited before `listening on`")
        # Keep reading its output so it never blocks on a full pipe.
        threading.Thread(target=lambda out: [None for _ in out], args=(self.process.stdout,),
                         daemon=True).start()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=60)

    def restart_after_kill(self) -> None:
        """`kill -9`, then the same server again on its address and database."""
        self.kill()
        self.spawn(self.addr)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
