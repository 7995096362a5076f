"""Waiting for the fleet-wide judge limits: RPM/TPM admission and the daily budget.

The state lives in Redis (`ragmon.store.judge_state.JudgeState`); this module only decides how a
call waits for its turn inside a job's event loop.
"""

from __future__ import annotations

import asyncio
import random

from ragmon.store.judge_state import MARGIN_S, WINDOW_S, JudgeState, Ticket

MAX_WAIT_SLICE_S = 5.0  # re-ask Redis at least this often while waiting


class RateLimiter:
    """Admits judge calls for one model under requests-per-minute and tokens-per-minute limits.

    All workers share the window through Redis, so with N workers the provider still sees at
    most `rpm` calls (and about `tpm` tokens) in any minute. 0 disables a limit.
    """

    def __init__(
        self,
        state: JudgeState,
        model: str,
        rpm: int,
        tpm: int,
        window_s: float = WINDOW_S + MARGIN_S,
    ) -> None:
        self.state = state
        self.model = model
        self.rpm = rpm
        self.tpm = tpm
        self.window_s = window_s

    @property
    def enabled(self) -> bool:
        return self.rpm > 0 or self.tpm > 0

    async def acquire(self, tokens: int) -> Ticket | None:
        """Wait until a call of about `tokens` tokens may start; None when no limit is set."""
        if not self.enabled:
            return None
        while True:
            wait, ticket = self.state.try_acquire(
                self.model, self.rpm, self.tpm, tokens, self.window_s
            )
            if ticket is not None:
                return ticket
            # jitter spreads the waiters so they do not all retry in the same millisecond
            await asyncio.sleep(min(wait, MAX_WAIT_SLICE_S) + random.uniform(0, 0.05))

    def settle(self, ticket: Ticket | None, tokens: int) -> None:
        """A call ended (in any way): record when, and the tokens it really used."""
        if ticket is not None:
            self.state.settle(ticket, tokens)
