"""What the LLM judge's calls cost: tokens, USD, today's spend and the daily budget.

Apart from the judge because it answers different questions: the judge decides what a call's
outcome was; this module turns the call's usage into tokens and dollars, counts them for the
whole fleet (`JudgeState` in Redis) and for this judge (calibrate's summary), and says when
the day's budget is spent. Without a store it only keeps this judge's totals.

Calls are counted in Redis in batches: `record` keeps a call, `flush` writes every call kept in
one round trip. The judge flushes once per graded event (its passages' calls together) and
before each budget check, so the budget always sees this judge's own spend.

A call is paid by the app whose event it grades (`paying`, set around an event's grading):
its spend counts against that app's own daily budget (RAGMON_APP_DAILY_BUDGET_USD) as well as
the fleet's (RAGMON_DAILY_BUDGET_USD). One judge serves the events of several apps at once,
each in its own asyncio task, so the app travels in a context variable, not on the judge.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ragmon.store.judge_state import Budget, JudgeCall
from ragmon.store.keys import utc_today
from ragmon.workers.judges.base import JudgeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ragmon.store.judge_state import JudgeState

log = logging.getLogger("ragmon.judge")
_warned_unpriced: set[str] = set()
#: The app whose event the judge is grading in this task (None: no event's).
_payer: ContextVar[str | None] = ContextVar("ragmon_judge_payer", default=None)


@contextmanager
def paying(app: str) -> Iterator[None]:
    """The judge calls made inside (and in the tasks started inside) are `app`'s to pay."""
    token = _payer.set(app)
    try:
        yield
    finally:
        _payer.reset(token)


def price_of(prices: dict[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    """USD per million (input, output) tokens: exact name, else the longest listed prefix
    (`gpt-4o-mini-2024-07-18` costs what `gpt-4o-mini` costs), else None."""
    if model in prices:
        return prices[model]
    best = max((m for m in prices if model.startswith(m)), key=len, default=None)
    return prices[best] if best else None


class Accounting:
    """Counts one judge's calls (outcome, latency, tokens, cost) and guards the daily budget."""

    def __init__(
        self,
        model: str,
        prices: dict[str, tuple[float, float]],
        daily_budget_usd: float,
        state: JudgeState | None = None,
        app_budget: Callable[[str], float] | None = None,
    ) -> None:
        self.model = model
        self._state = state
        self._budget = Budget(state, daily_budget_usd, app_budget) if state is not None else None
        #: Totals of this judge's calls (calibrate's summary, the token-saving measurement).
        self.usage_in = self.usage_out = self.calls = 0
        self._pending: list[JudgeCall] = []
        self._price = price_of(prices, model)
        if self._price is None and model not in _warned_unpriced:
            _warned_unpriced.add(model)
            log.warning(
                'no price for judge model %r: its cost counts as 0; set RAGMON_PRICES=\'{"%s": '
                "[usd_per_million_input, usd_per_million_output]}'",
                model,
                model,
            )

    def check_budget(self) -> None:
        """Raise `budget_exhausted` (lasting) once today's fleet-wide spend reached the fleet's
        budget, or the paying app's spend its own; the message names the app and the limit."""
        self.flush()
        budget = self._budget
        if budget is None:
            return
        app = _payer.get()
        whose = f"app {app!r}: " if app is not None else ""
        later = "the event is stored, re-judge it later with `ragmon requeue-failed`"
        if budget.exhausted():
            raise JudgeError(
                "budget_exhausted",
                f"{whose}today's judge spend of the whole fleet reached "
                f"RAGMON_DAILY_BUDGET_USD={budget.daily_usd:g}; {later}",
            )
        limit = budget.app_exhausted(app) if app is not None else None
        if limit is not None:
            raise JudgeError(
                "budget_exhausted",
                f"app {app!r} spent its own judge budget of today, "
                f"{limit:g} USD (RAGMON_APP_DAILY_BUDGET_USD); {later}",
            )

    def record(self, outcome: str, latency: float, usage: Any = None) -> None:
        """Count one call: outcome, latency, tokens and their cost (also into today's spend),
        in Redis at the next `flush`. `usage` is the completion's (`prompt_tokens`,
        `completion_tokens`), None when the call got no answer."""
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0
        if self._price is not None:
            cost = (tokens_in * self._price[0] + tokens_out * self._price[1]) / 1_000_000
        self.usage_in += tokens_in
        self.usage_out += tokens_out
        self.calls += 1
        if self._state is not None:
            self._pending.append(
                JudgeCall(
                    self.model,
                    outcome,
                    latency,
                    utc_today(),
                    tokens_in,
                    tokens_out,
                    cost,
                    _payer.get(),
                )
            )

    def flush(self) -> None:
        """Write the calls recorded since the last flush (fleet counters, today's spend)."""
        if self._pending and self._state is not None:
            calls, self._pending = self._pending, []
            self._state.record_calls(calls)
