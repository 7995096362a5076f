"""`ragmon` as a real child process whose stderr is read line by line while it runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from tests.support.stack import Child
from tests.support.waiting import scaled


class Ragmon:
    """`python -m ragmon.cli ARGS` in its own session; `lines` fills as stderr arrives."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike | None = None
    ) -> None:
        self.proc = Child(
            [sys.executable, "-m", "ragmon.cli", *args],
            env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.out: list[str] = []
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stderr, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read(self, stream, into: list[str]) -> None:
        for line in stream:
            with self._lock:
                into.append(line.rstrip("\n"))

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(
        self, pattern: str, timeout: float = 60, count: int = 1, stdout: bool = False
    ) -> list[str]:
        """The first `count` stderr (or stdout) lines matching `pattern`; fails after
        `timeout` seconds."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + scaled(timeout)
        while True:
            with self._lock:
                found = [
                    line for line in (self.out if stdout else self.lines) if regex.search(line)
                ]
            if len(found) >= count:
                return found[:count]
            if time.monotonic() > deadline or (
                self.proc.poll() is not None and not any(t.is_alive() for t in self._readers)
            ):
                raise AssertionError(
                    f"no {count} line(s) matching {pattern!r} (exit {self.proc.poll()}):\n"
                    + self.text()[-3000:]
                )
            time.sleep(0.05)

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        for t in self._readers:
            t.join(5)
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """`sig` to its process group, then SIGKILL to what is left of its tree."""
        self.proc.stop(sig, timeout)
        return self.wait(10)


def run_ragmon(
    args: Sequence[str],
    env: Mapping[str, str],
    timeout: float = 60,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run `ragmon ARGS` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "ragmon.cli", *args],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
