"""The decoding process is shared by turns (`ragmon.api.shares.FairChild`): another app's body
waits for the one body in progress, not for one app's whole queue of bombs; an app past its
waiting limit is refused, naming it and the limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from ragmon.api.shares import WAITING_PER_APP, FairChild, QueueFull


class Child:
    """A stand-in decoding process: one call at a time, in order, each taking a turn of the
    loop; it notes the order it ran them in."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.ran: list[str] = []
        self.lock = asyncio.Lock()
        self.gate = gate  # closed: every call waits for it

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        async with self.lock:
            await asyncio.sleep(0)
            if self.gate is not None:
                await self.gate.wait()
            self.ran.append(args[0])
            return fn(*args)

    def close(self) -> None:
        pass


def test_another_apps_body_waits_for_one_body_not_the_queue() -> None:
    async def go() -> list[str]:
        child = Child()
        fair = FairChild([child])  # type: ignore[list-item]
        bombs = [asyncio.ensure_future(fair.run("app A", str, f"A{i}")) for i in range(10)]
        await asyncio.sleep(0)
        one = asyncio.ensure_future(fair.run("app B", str, "B0"))
        assert await one == "B0"
        await asyncio.gather(*bombs)
        return child.ran

    ran = asyncio.run(go())
    assert ran.index("B0") <= 2  # behind the body in progress (and one more at most)
    assert sorted(ran) == sorted([f"A{i}" for i in range(10)] + ["B0"])


def test_an_app_past_its_waiting_limit_is_refused_and_others_are_not() -> None:
    async def go() -> None:
        gate = asyncio.Event()
        fair = FairChild([Child(gate)])  # type: ignore[list-item]
        held = [asyncio.ensure_future(fair.run("app A", str, f"A{i}"))
                for i in range(WAITING_PER_APP + 1)]  # fmt: skip
        await asyncio.sleep(0)
        assert fair.waiting() == {"app A": WAITING_PER_APP}  # and A0 in the child
        with pytest.raises(QueueFull, match=f"app A has {WAITING_PER_APP} bodies waiting"):
            await fair.run("app A", str, "one more")
        other = asyncio.ensure_future(fair.run("app B", str, "B0"))
        await asyncio.sleep(0)
        gate.set()
        assert await other == "B0"
        await asyncio.gather(*held)

    asyncio.run(go())


def test_one_apps_body_in_progress_leaves_the_other_child_to_another_app() -> None:
    async def go() -> None:
        gate = asyncio.Event()
        held, free = Child(gate), Child()
        fair = FairChild([free, held])  # type: ignore[list-item]  # `held` is taken first
        bombs = [asyncio.ensure_future(fair.run("app A", str, f"A{i}")) for i in range(3)]
        await asyncio.sleep(0)
        assert await fair.run("app B", str, "B0") == "B0"  # while A0 holds a child
        assert free.ran == ["B0"]  # A's next bodies wait for A0: one of A's at a time
        gate.set()
        await asyncio.gather(*bombs)

    asyncio.run(go())


def test_a_request_gone_while_waiting_is_skipped_and_errors_reach_their_caller() -> None:
    async def go() -> list[str]:
        child = Child()
        fair = FairChild([child])  # type: ignore[list-item]
        first = asyncio.ensure_future(fair.run("app A", str, "A0"))
        gone = asyncio.ensure_future(fair.run("app A", str, "A1"))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(ValueError):
            await fair.run("app B", int, "not a number")
        assert await first == "A0"
        return child.ran

    assert "A1" not in asyncio.run(go())
