"""What the sampling planner keeps in Redis: each series' accepted events per UTC hour (the
forecast's input), the current plan (rates per series, the day's pace), and who plans next."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import cast

import redis

from ragmon.core.sampling import APP_MARK, HOURS, Rates
from ragmon.core.wire import SEP, field_name, series_app
from ragmon.store.fields import Kind, Name
from ragmon.store.keys import Keys
from ragmon.store.ledger import FIELD_OVERHEAD, PACE_TTL_S, Ledger
from ragmon.store.records import histograms_of, text_of

TRAFFIC_TTL_S = (HOURS + 2) * 3600
MIN_FOR_SD = 30  # judged events a series needs before its own spread is used
PLAN_STALE_S = 600.0  # an older plan is not used: its planner stopped

Paced = dict[str, tuple[int, float]]  # key → (events chosen, sum of their probabilities)


def hour_of(ts: float) -> str:
    """The UTC hour of `ts` as the traffic keys name it, `YYYYMMDDHH`."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%d%H")


@dataclass(frozen=True)
class StoredPlan:
    """A plan as the API and `/metrics` read it (`runout`: unix time, None: not today)."""

    at: float
    rates: dict[str, float] = field(default_factory=dict)
    default: float = 1.0
    spent: float = 0.0
    budget: float = 0.0
    pace: float = 0.0
    runout: float | None = None
    cap: float | None = None  # events one series may have chosen per planning interval

    def to_rates(self) -> Rates:
        return Rates(dict(self.rates), self.default, self.cap)


def key_app(key: str) -> str:
    """The app of a pacing key: a series (`app|...`) or `app:` + app."""
    return key[len(APP_MARK) :] if key.startswith(APP_MARK) else series_app(key)


def pace_bytes(key: str, n: int, p: float) -> int:
    """What a key's two pacing fields take when created (its count and its sum), as fields
    of a hashtable: a hash small enough for a listpack takes less."""
    return 2 * (FIELD_OVERHEAD + len(key)) + len(str(n)) + len(repr(p))


class SamplingState:
    def __init__(self, client: redis.Redis, keys: Keys, ledger: Ledger) -> None:
        self.client = client
        self.keys = keys
        self.ledger = ledger

    def count(self, counts: Mapping[str, int], now: float) -> None:
        """Add accepted events per series to the current hour's counts; a series' first count
        of the hour (a new field) is charged to its app's ledger (`sampling`)."""
        if not counts:
            return
        key = self.keys.traffic(hour_of(now))
        with self.client.pipeline(transaction=False) as pipe:
            for series, n in counts.items():
                pipe.hincrby(key, series, n)
            pipe.expire(key, TRAFFIC_TTL_S)
            for series in counts:  # its age: the plan reads its traffic over it
                pipe.hsetnx(self.keys.sampling_first, series, int(now))
            pipe.expire(self.keys.sampling_first, TRAFFIC_TTL_S)
            totals = pipe.execute()[: len(counts)]
        new = [x for (x, n), total in zip(counts.items(), totals, strict=True) if total == n]
        if new:
            with self.client.pipeline(transaction=True) as pipe:
                for series in new:
                    nbytes = FIELD_OVERHEAD + len(series) + len(str(counts[series]))
                    self.ledger.charge(pipe, series_app(series), Kind.SAMPLING, nbytes, now)
                pipe.execute()

    def ages(self, now: float, traffic: Mapping[str, Sequence[float]]) -> dict[str, float]:
        """Hours since each series of `traffic` was first counted (a quiet series counted long
        ago is as old as that), or since the start of its first hour with traffic when its
        first count is unknown (counted before ages were kept); series with traffic in the
        oldest hour kept are left out (old)."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.sampling_first))
        first = {text_of(k): float(v) for k, v in raw.items()}
        hour0 = math.floor(now / 3600) * 3600 - 3600 * (HOURS - 1)
        out = {}
        for series, hours in traffic.items():
            start = next((i for i, n in enumerate(hours) if n > 0), 0)
            if start == 0:
                continue
            began = hour0 + 3600 * start
            out[series] = (now - min(first.get(series, began), now)) / 3600
        return out

    def traffic(self, now: float) -> dict[str, list[float]]:
        """Per series, its events in each of the `HOURS` hours ending with the current one."""
        hours = [hour_of(now - 3600 * (HOURS - 1 - i)) for i in range(HOURS)]
        with self.client.pipeline(transaction=False) as pipe:
            for h in hours:
                pipe.hgetall(self.keys.traffic(h))
            rows = cast(list[dict[bytes, bytes]], pipe.execute())
        out: dict[str, list[float]] = {}
        for i, row in enumerate(rows):
            for series, n in row.items():
                out.setdefault(text_of(series), [0.0] * HOURS)[i] = float(n)
        return out

    def save(self, plan: StoredPlan) -> None:
        self.client.set(self.keys.sampling_plan, json.dumps(asdict(plan)), ex=int(PLAN_STALE_S))

    def load(self, now: float) -> StoredPlan | None:
        """The current plan, or None when there is none younger than `PLAN_STALE_S`."""
        raw = self.client.get(self.keys.sampling_plan)
        if raw is None:
            return None
        plan = StoredPlan(**json.loads(raw))
        return plan if now - plan.at < PLAN_STALE_S else None

    def lead(self, owner: str, ttl_s: float) -> bool:
        """True for the one process that plans next (the others read its plan); the process
        holding the lead may plan again before it ends (a new series)."""
        key = self.keys.sampling_lead
        if self.client.set(key, owner, nx=True, ex=max(1, int(ttl_s))):
            return True
        return self.client.get(key) == owner.encode()

    def pace(
        self, interval: int, chosen: Mapping[tuple[int, str], tuple[int, float]], now: float
    ) -> tuple[Paced, Paced]:
        """Add one API process' newly chosen events (by planning interval and key: a series or
        `app:` + app) to the fleet's, and return the fleet's of `interval` and of the one
        before: the pacing's counts, shared by every API process.

        The two hashes of an interval are the fleet's, read whole by every flush; each app is
        charged for its own fields (`pace` in the ledger) when a flush creates them. A hash
        expires `PACE_TTL_S` after its first write (not renewed), so no field outlives the
        ledger's window for it."""
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for (i, key), (n, p) in chosen.items():
                pipe.hincrby(k.pace(i, "n"), key, n)
                pipe.hincrbyfloat(k.pace(i, "p"), key, p)
            for i in {i for i, _ in chosen}:
                pipe.expire(k.pace(i, "n"), PACE_TTL_S, nx=True)
                pipe.expire(k.pace(i, "p"), PACE_TTL_S, nx=True)
            for i in (interval, interval - 1):
                pipe.hgetall(k.pace(i, "n"))
                pipe.hgetall(k.pace(i, "p"))
            replies = pipe.execute()
        rows = cast(list[dict[bytes, bytes]], replies[-4:])
        totals = replies[0 : 2 * len(chosen) : 2]
        new = [(key, n, p) for ((_, key), (n, p)), t in zip(chosen.items(), totals, strict=True)
               if t == n]  # fmt: skip
        if new:
            with self.client.pipeline(transaction=True) as pipe:
                for key, n, p in new:
                    self.ledger.charge(pipe, key_app(key), Kind.PACE, pace_bytes(key, n, p), now)
                pipe.execute()

        def paced(ns: dict[bytes, bytes], ps: dict[bytes, bytes]) -> Paced:
            return {text_of(x): (int(ns[x]), float(ps.get(x, 0.0))) for x in ns}

        return paced(rows[0], rows[1]), paced(rows[2], rows[3])

    def cost_per_event(self) -> float:
        """USD spent on the judge per judged event so far (every model), 0 before any."""
        counters = self.keys.counters
        spent = sum(
            float(v)
            for _, v in self.client.hscan_iter(counters, match=f"judge_cost_usd{SEP}*", count=1000)
        )
        labeled = self.client.hget(counters, Name.EVENTS_LABELED.value)
        n = int(cast(bytes, labeled)) if labeled is not None else 0
        return spent / n if n else 0.0

    def spreads(self, measure: str, bounds: Sequence[float]) -> dict[str, float]:
        """Each series' standard deviation of `measure`, from its histogram's sums (series
        with fewer than `MIN_FOR_SD` observations are left out)."""
        name = f"retrieval_{measure}"
        raw = dict(self.client.hscan_iter(self.keys.hist, match=f"{name}{SEP}*", count=1000))
        hists = histograms_of(raw, {name: bounds}).get(name, {})
        out = {}
        for labels, h in hists.items():
            if h.count >= MIN_FOR_SD and h.sum_squares is not None:
                mean = h.sum / h.count
                out[field_name(*labels)] = math.sqrt(max(1e-6, h.sum_squares / h.count - mean**2))
        return out
