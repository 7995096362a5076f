"""The decoding processes shared fairly: a queue per app, the apps in turn, one body of an app
in a child at a time.

One child decoded every app's OTLP exports and large event bodies, one body at a time, in the
order they came: one app's loop of bombs (each seconds of decoding) put another app's
one-span export behind all of them. Here each app's bodies wait in its own queue; `DECODERS`
children take the apps in turn, one body each, and never two bodies of one app at once, so
while one app's bomb holds a child another app's body takes the other; and an app with
`WAITING_PER_APP` bodies waiting has the next refused (`429`, naming the app and the limit)
instead of holding memory for them.

The app is the API key's app; a key not bound to one app (or no key) is shared by its client
address, so two apps behind one unbound key on different hosts still take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from ragmon.api.child import ChildProcess

WAITING_PER_APP = 16  # bodies of one app waiting for a child, beyond the one it decodes
DECODERS = 2  # children: one app's bodies take one at a time, another app's the other
DECODE_NICE = 10  # their CPU priority below the API's


class QueueFull(Exception):
    """`who` already has `WAITING_PER_APP` bodies waiting to be decoded."""

    def __init__(self, who: str) -> None:
        self.who = who
        super().__init__(
            f"{who} has {WAITING_PER_APP} bodies waiting to be decoded (the limit per app): "
            "retry later, or send fewer at once"
        )


def lower_priority() -> None:
    """In a decoding process: below the API's loop, so that the bodies it decodes take the CPU
    the loop leaves (a health check, a small request, never waits for a bomb's decoding)."""
    with contextlib.suppress(OSError):
        os.nice(DECODE_NICE)


Job = tuple[asyncio.Future, Callable[..., Any], tuple[Any, ...]]


class FairChild:
    """`ChildProcess.run` over `DECODERS` children, with a queue per app taken in turn and one
    body of an app at a time: another app's body takes a free child while one app's bomb
    holds the other."""

    def __init__(self, children: list[ChildProcess] | None = None) -> None:
        self.children = children or [ChildProcess(lower_priority) for _ in range(DECODERS)]
        self._free = list(self.children)  # a child starts on its first body
        self._queues: OrderedDict[str, deque[Job]] = OrderedDict()
        self._running: set[str] = set()  # apps with a body in a child
        self._tasks: set[asyncio.Task] = set()

    async def run(self, who: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a child, in `who`'s turn (`QueueFull` past its limit)."""
        queue = self._queues.setdefault(who, deque())
        if len(queue) >= WAITING_PER_APP:
            raise QueueFull(who)
        done = asyncio.get_running_loop().create_future()
        queue.append((done, fn, args))
        self._dispatch()
        return await done

    def _dispatch(self) -> None:
        """Give each free child the first waiting body of the next app in turn that has none
        in a child."""
        while self._free:
            who = next((w for w in self._queues if w not in self._running), None)
            if who is None:
                return
            queue = self._queues.pop(who)
            done, fn, args = queue.popleft()
            if queue:
                self._queues[who] = queue  # back of the line
            if done.done():  # its request has gone
                continue
            child = self._free.pop()
            self._running.add(who)
            task = asyncio.create_task(self._one(child, who, done, fn, args))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(
        self, child: ChildProcess, who: str, done: asyncio.Future, fn: Callable, args: tuple
    ) -> None:
        try:
            result = await child.run(fn, *args)
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
        else:
            if not done.done():
                done.set_result(result)
        finally:
            self._free.append(child)
            self._running.discard(who)
            self._dispatch()

    def waiting(self) -> dict[str, int]:
        return {who: len(q) for who, q in self._queues.items()}

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for queue in self._queues.values():
            for done, _, _ in queue:
                done.cancel()
        self._queues.clear()
        for child in self.children:
            child.close()
