"""The sender thread of a `RetrievalMonitor`: outbox batches → `POST /v1/retrievals/batch`
over one kept-alive connection, with backoff; every event's outcome is counted."""

from __future__ import annotations

import contextlib
import http.client
import random
import time

from ragmon.client.connection import Response
from ragmon.client.events import decode
from ragmon.client.outbox import Batch
from ragmon.client.state import MonitorState
from ragmon.retry import retry_after_s

BATCH_PATH = "/v1/retrievals/batch"
MAX_RETRY_AFTER_S = 120.0


class Sender(MonitorState):
    """The sender's part of `RetrievalMonitor` (which sets these attributes)."""

    _flush_interval: float
    _max_retries: int
    _backoff: float
    _backoff_max: float

    def _send_loop(self) -> None:
        while True:
            try:
                done = self._encoder_done.is_set()
                if not self._closing.is_set():
                    self._wake_sender.wait(self._flush_interval)
                    self._wake_sender.clear()
                elif not done:  # closing: full batches only until the encoder has finished
                    self._encoder_done.wait(0.01)
                while self._send_batch(full_only=self._closing.is_set() and not done):
                    pass
                if done:
                    return
            except Exception:
                self._bump("errors")
                self._warn("sender", "ragmon sender error", exc_info=True)
                time.sleep(0.1)

    def _send_batch(self, full_only: bool = False) -> bool:
        """Take one batch out of the outbox and post it; False when there is none to send."""
        with self._out_lock:
            if full_only and not self._out.full():
                return False
            batch = self._out.take()
            if batch is None:
                return False
            self._sending = len(batch)
        try:
            self._post(batch, batch.live())
        except Exception:
            self._settle("dropped_send_failed", self._sending)  # what _post left unsettled
            raise
        finally:
            with self._out_lock:
                self._out.release(batch)
        return True

    def _post(self, batch: Batch, items: list[int]) -> None:
        """Post these events with retries; split them on 413, drop bad items named by a 422."""
        body = batch.body(items)
        for attempt in range(self._max_retries + 1):
            if attempt:
                self._bump("retries")
            try:
                resp = self._http.post(BATCH_PATH, body)
            except (OSError, http.client.HTTPException) as exc:
                kind, delay = type(exc).__name__, None
                self._warn(f"http-{kind}", f"ragmon sidecar unreachable ({kind}): {exc}")
            else:
                code = resp.status
                if code < 300:
                    self._settle("sent", len(items), sampled=_sampled_out(resp))
                    return
                if code == 413 and len(items) > 1:
                    half = len(items) // 2
                    del body
                    self._post(batch, items[:half])
                    self._post(batch, items[half:])
                    return
                if code == 422 and len(items) > 1:
                    bad = _bad_items(resp)
                    if bad and len(bad) < len(items):
                        self._settle("rejected", len(bad))
                        self._warn("422", f"ragmon rejected events: {resp.text[:500]}")
                        del body
                        self._post(batch, [e for i, e in enumerate(items) if i not in bad])
                        return
                if code != 429 and code < 500:
                    self._settle("rejected", len(items))
                    self._warn(f"{code}", f"ragmon answered {code}: {resp.text[:500]}")
                    return
                delay = retry_after_s(resp.headers)
                self._warn(f"{code}", f"ragmon answered {code}; retrying")
            if attempt == self._max_retries:
                break
            if delay is None:
                cap = min(self._backoff_max, self._backoff * 2**attempt)
                delay = cap / 2 + random.uniform(0, cap / 2)
            else:
                delay = min(delay, MAX_RETRY_AFTER_S) * random.uniform(1.0, 1.1)
            if not self._sleep(delay):
                self._settle("dropped_at_close", len(items))
                return
        self._settle("dropped_send_failed", len(items))

    def _settle(self, outcome: str, n: int, sampled: int = 0) -> None:
        """Count `n` in-flight events under `outcome` (atomically, so the totals add up)."""
        with self._out_lock:
            self._n[outcome] += n
            self._sending -= n
            if outcome == "sent":
                self._n["sampled_out"] += sampled
                self._n["batches"] += 1

    def _sleep(self, seconds: float) -> bool:
        """Sleep, cut short by the close deadline; False if the deadline has passed."""
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            deadline = self._deadline
            limit = end if deadline is None else min(end, deadline)
            if now >= limit:
                return deadline is None or now < deadline
            if self._closing.is_set():
                time.sleep(limit - now)
            else:
                self._closing.wait(limit - now)


def _sampled_out(resp: Response) -> int:
    """How many items a batch answer says were sampled out (parsed only when there are some)."""
    if b"sampled_out" not in resp.body:
        return 0
    with contextlib.suppress(Exception):
        return sum(r.get("status") == "sampled_out" for r in decode(resp.body)["results"])
    return 0


def _bad_items(resp: Response) -> set[int]:
    """Positions of batch items a 422 names (`loc` = ["body", "events", i, ...])."""
    try:
        detail = decode(resp.body)["detail"]
        return {
            d["loc"][2]
            for d in detail
            if list(d["loc"][:2]) == ["body", "events"] and isinstance(d["loc"][2], int)
        }
    except Exception:
        return set()
