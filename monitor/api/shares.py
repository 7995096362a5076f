"""The decoding process shared fairly: a queue per app, the apps in turn.

One child decodes every app's OTLP exports and large event bodies, one body at a time. In the
order they came, one app's loop of bombs (each a second of decoding) put another app's
one-span export behind all of them. Here each app's bodies wait in its own queue, the child
takes the apps in turn, one body each, so another app's body waits for at most the one in
progress; and an app with `WAITING_PER_APP` bodies waiting has the next refused (`429`, naming
the app and the limit) instead of holding memory for them.

The app is the API key's app; a key not bound to one app (or no key) is shared by its client
address, so two apps behind one unbound key on different hosts still take turns.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from ragmon.api.child import ChildProcess

WAITING_PER_APP = 16  # bodies of one app waiting for the child, beyond the one it decodes


class QueueFull(Exception):
    """`who` already has `WAITING_PER_APP` bodies waiting to be decoded."""

    def __init__(self, who: str) -> None:
        self.who = who
        super().__init__(
            f"{who} has {WAITING_PER_APP} bodies waiting to be decoded (the limit per app): "
            "retry later, or send fewer at once"
        )


Job = tuple[asyncio.Future, Callable[..., Any], tuple[Any, ...]]


class FairChild:
    """`ChildProcess.run` with a queue per app, taken in turn."""

    def __init__(self, child: ChildProcess | None = None) -> None:
        self.child = child or ChildProcess()
        self._queues: OrderedDict[str, deque[Job]] = OrderedDict()
        self._task: asyncio.Task | None = None

    async def run(self, who: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in the child, in `who`'s turn (`QueueFull` past its limit)."""
        queue = self._queues.setdefault(who, deque())
        if len(queue) >= WAITING_PER_APP:
            raise QueueFull(who)
        done = asyncio.get_running_loop().create_future()
        queue.append((done, fn, args))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._serve(), name="ragmon-decoding")
        return await done

    async def _serve(self) -> None:
        while self._queues:
            who, queue = self._queues.popitem(last=False)  # the app whose turn it is
            done, fn, args = queue.popleft()
            if queue:
                self._queues[who] = queue  # back of the line
            if done.done():  # its request has gone
                continue
            try:
                result = await self.child.run(fn, *args)
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
            else:
                if not done.done():
                    done.set_result(result)

    def waiting(self) -> dict[str, int]:
        return {who: len(q) for who, q in self._queues.items()}

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for queue in self._queues.values():
            for done, _, _ in queue:
                done.cancel()
        self._queues.clear()
        self.child.close()
