"""Grades for one event: known grades first, then the judgment cache, then the judge."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragmon.core.utility_measures import UMBRELA_TO_UTILITY, UTILITY_TO_UMBRELA
from ragmon.core.wire import SEP
from ragmon.store import event_day, query_hash, text_hash
from ragmon.store.records import StoredEvent, StoredPassage
from ragmon.workers.judges import utility
from ragmon.workers.judges.accounting import paying
from ragmon.workers.judges.base import Judge, JudgeError
from ragmon.workers.judges.cache import JudgmentCache
from ragmon.workers.judges.llm import LISTWISE_MAX

if TYPE_CHECKING:
    from ragmon.store import Store

KNOWN, CACHE, JUDGE = "known", "cache", "judge"


@dataclass
class Graded:
    """An event's grades, one per passage (None: not graded), with where each came from.

    `duplicate_of[i]` is the 1-based rank of the earlier passage with the same id (None for a
    first occurrence): a repeat is not judged again and scores as not relevant. `unjudged`
    counts, per reason, the passages of the top 2K the judge could not grade for good: a
    lasting failure, or a passing one on the event's last attempt; those of a passing one are
    listed in `apart` (0-based ranks), to be retried apart from the event.
    """

    grades: list[int | None]
    sources: list[str | None]
    duplicate_of: list[int | None]
    unjudged: dict[str, int] = field(default_factory=dict)
    apart: list[int] = field(default_factory=list)

    def repeats(self) -> list[bool]:
        return [d is not None for d in self.duplicate_of]


def judged_depth(event: StoredEvent) -> int:
    """How deep the judge goes: the top 2K (F_e's N̂_p). Known grades count at any depth."""
    return min(len(event["passages"]), 2 * event["k"])


def judge_calls(event: StoredEvent, listwise: bool, probes: bool) -> int:
    """The judge calls an event costs at most (a known or cached grade costs none): one a
    judged passage, or one per `LISTWISE_MAX` of them listwise, and one a top-K passage more
    with the utility probe (`probes`)."""
    depth = judged_depth(event)
    calls = -(-depth // LISTWISE_MAX) if listwise else depth
    if probes:
        calls += min(event["k"], len(event["passages"]))
    return max(1, calls)


def duplicates(passages: list[StoredPassage]) -> list[int | None]:
    """For each passage, the 1-based rank of the first earlier passage with the same id."""
    first: dict[str, int] = {}
    out: list[int | None] = []
    for rank, p in enumerate(passages, start=1):
        out.append(first.get(p["id"]))
        first.setdefault(p["id"], rank)
    return out


@dataclass
class InFlight:
    """Grades the judge is being asked for within one job, by (query, passage text).

    Repeated questions arrive together: when two events of a job hold the same passage for
    the same query, the second waits for the first one's grade instead of paying the judge
    twice (and both get the same grade). A grade the first could not get is asked again.
    Like the cache, only within one app unless RAGMON_SHARED_CACHE=true (`app` None)."""

    asked: dict[tuple[str | None, str, str], asyncio.Future[int | None]] = field(
        default_factory=dict
    )

    def key(self, app: str | None, query: str, text: str) -> tuple[str | None, str, str]:
        return app, query_hash(query), text_hash(text)


async def grade_event(
    event: StoredEvent,
    judge: Judge,
    store: Store,
    inflight: InFlight | None = None,
    last_try: bool = False,
) -> Graded:
    """Known grades (at every depth), then the judgment cache, then the judge (top 2K only),
    its calls paid by the event's app (`accounting.paying`: its own budget, then the fleet's).

    Grades are on the judge's scale (known 0-3 grades are mapped to 1-5 for a utility5 judge;
    `on_both_scales` splits them). Each passage has its own outcome: one the judge cannot
    grade for a lasting reason stays None and is counted in `unjudged`; a passing failure
    (429, 5xx, timeout) raises the judge's retryable `JudgeError` so that the event is tried
    again, unless `last_try` (the event waits no longer: from the delivery's `RELEASE_ATTEMPT`-th
    try on, so that one failing passage does not hold the other grades for the whole retry
    ladder): then it is counted in `unjudged` under its reason as a lasting one is. Either
    raises when no passage of the event has a grade at all: such an event keeps retrying, and
    fails only when nothing could be graded. `store` holds
    the judgment cache, which gets every grade the judge gives, even those of an event that
    then fails.
    """
    with paying(event["labels"]["app"]):
        return await _grade_event(event, judge, store, inflight, last_try)


async def _grade_event(
    event: StoredEvent, judge: Judge, store: Store, inflight: InFlight | None, last_try: bool
) -> Graded:
    passages = event["passages"]
    depth = judged_depth(event)
    dup = duplicates(passages)
    out = Graded([None] * len(passages), [None] * len(passages), dup)
    todo: list[int] = []
    five = _grades_1_to_5(judge)
    for i, p in enumerate(passages):
        if dup[i] is not None:
            continue
        g = p.get("grade")
        if g is not None:
            out.grades[i], out.sources[i] = (UMBRELA_TO_UTILITY[g] if five else g), KNOWN
        elif i < depth:
            todo.append(i)
    if not todo:
        return out

    query = event["query"]
    ask = functools.partial(_ask, judge, query=query, passages=passages, out=out, last=last_try)
    if judge.per_call:  # its grades depend on the call's other passages: never shared
        await ask(None, todo)
        return out
    texts = [passages[i]["text"] for i in todo]
    cache = JudgmentCache.of(store, judge.identity, event)
    cached = cache.grades(query, texts)
    misses = []
    for i, g in zip(todo, cached, strict=True):
        if g is None:
            misses.append(i)
        else:
            out.grades[i], out.sources[i] = g, CACHE
    day = event_day(event)
    store.incr("judge_cache_hits", len(todo) - len(misses), day=day)
    store.incr("judge_cache_misses", len(misses), day=day)
    if not misses:
        return out
    if inflight is None:
        await ask(cache, misses)
        return out
    keys = {i: inflight.key(cache.app, query, passages[i]["text"]) for i in misses}
    others = {i: inflight.asked[keys[i]] for i in misses if keys[i] in inflight.asked}
    mine = [i for i in misses if i not in others]
    loop = asyncio.get_running_loop()
    for i in mine:
        inflight.asked.setdefault(keys[i], loop.create_future())
    try:
        await ask(cache, mine)
    finally:
        for i in mine:  # resolved and forgotten: later events of the job find the cache
            fut = inflight.asked.pop(keys[i], None)
            if fut is not None and not fut.done():
                fut.set_result(out.grades[i])
    again = []
    for i, fut in others.items():
        g = await fut
        if g is None:
            again.append(i)
        else:
            out.grades[i], out.sources[i] = g, JUDGE
    await ask(cache, again)
    return out


async def _ask(
    judge: Judge,
    cache: JudgmentCache | None,
    idx: list[int],
    *,
    query: str,
    passages: list[StoredPassage],
    out: Graded,
    last: bool,
) -> None:
    """Have the judge grade passages `idx` into `out` and cache every grade it gives (also those
    of a failed call, so a retry pays only for the rest). A lasting failure leaves its passages
    unjudged (counted, each under its own reason), and so does a passing one when `last`; a
    passing one otherwise raises, and so does any failure when no passage has a grade."""
    if not idx:
        return
    items = [(passages[i]["id"], passages[i]["text"]) for i in idx]
    failure: JudgeError | None = None
    try:
        got: list[int | None] = list(await judge.grade(query, items))
    except JudgeError as exc:
        failure, got = exc, exc.grades or [None] * len(idx)
    if cache is not None:
        answers = [(text, g) for (_, text), g in zip(items, got, strict=True)]
        cache.keep(query, answers)
    if failure is not None and failure.retryable and not last:
        raise failure  # waiting may get every grade: the event is tried again
    reasons = [None] * len(idx) if failure is None else failure.passage_reasons(len(idx))
    for i, g in zip(idx, got, strict=True):
        out.grades[i], out.sources[i] = g, (JUDGE if g is not None else None)
    if failure is not None and all(g is None for g in out.grades):
        raise failure  # nothing could be graded: the event fails (or waits, if passing)
    for i, g, reason in zip(idx, got, reasons, strict=True):
        if g is None and reason is not None:
            out.unjudged[reason] = out.unjudged.get(reason, 0) + 1
            if failure is not None and failure.retryable and cache is not None:
                out.apart.append(i)


def pooled(event: StoredEvent, graded: Graded, judge: Judge, store: Store) -> list[int] | None:
    """The query's pooled ideal (`ragmon.store.pool`) with this event's grades merged in: the
    best grade, on the judge's scale, of every passage graded for the query in this app by this
    judge identity, across retrievers and time. Only grades that weigh in an ideal join it
    (0-3 grade 1 and up). Kept whatever the judge: a judge whose grades depend on the call's
    other passages (the lexical judge's IDF) is never served from the cache, but the pool
    keeps the best grade any call gave a passage, and each grade's count is floored at the
    event's own (`compute`), so a pooled value stays at most 1. None when no pool is kept
    (RAGMON_CACHE_TTL_DAYS=0): the pooled measures then equal the per-event ones."""
    five = _grades_1_to_5(judge)
    useful = 2 if five else 1  # 1-5 grade 2 maps to 0-3 grade 1
    own: dict[str, int] = {}
    for p, g, dup in zip(event["passages"], graded.grades, graded.duplicate_of, strict=True):
        if g is not None and dup is None and g >= useful:
            h = text_hash(p["text"])
            own[h] = max(g, own.get(h, g))
    who = judge.identity
    pool = store.pool.merge(event["labels"]["app"], who.model, who.cache_version,
                            event["query"], own)  # fmt: skip
    return None if pool is None else list(pool.values())


def _grades_1_to_5(judge: Judge) -> bool:
    return getattr(getattr(judge, "scale", None), "name", "") == "utility5"


def on_both_scales(
    grades: list[int | None], judge: Judge
) -> tuple[list[int | None], list[int | None] | None]:
    """`(0-3 grades, 1-5 grades or None)`: a utility5 judge's grades (RAGMON_JUDGE_SCALE) feed
    RA-nWG as they are and the other measures through `UTILITY_TO_UMBRELA`."""
    if not _grades_1_to_5(judge):
        return grades, None
    return [None if u is None else UTILITY_TO_UMBRELA[u] for u in grades], grades


async def probe_event(
    event: StoredEvent, judge: Judge, store: Store, last_try: bool = False
) -> tuple[list[float | None], str | None]:
    """p(NO-RESPONSE) of each top-K passage for UDCG (RAGMON_UTILITY=on): the cache, then one
    probe call per missing passage. Returns `(p's, None)`, one per passage (None past K), or
    `(p's, reason)` when UDCG must stay null: `no_logprobs` (the endpoint gives none),
    `no_llm` (the lexical judge cannot probe) or a lasting judge failure's reason.

    A passing failure (429, timeout...) raises the judge's retryable `JudgeError` after caching
    the p's it did get, so the event's next attempt pays only for the rest; on its last try
    (`last_try`, as for `grade_event`) UDCG stays null with that failure's reason instead.
    The event's app pays.
    """
    with paying(event["labels"]["app"]):
        return await _probe_event(event, judge, store, last_try)


async def _probe_event(
    event: StoredEvent, judge: Judge, store: Store, last_try: bool
) -> tuple[list[float | None], str | None]:
    passages = event["passages"]
    k = min(event["k"], len(passages))
    ps: list[float | None] = [None] * len(passages)
    probe = getattr(judge, "no_response_p", None)
    if probe is None:
        return ps, "no_llm"
    query = event["query"]
    texts = [p["text"] for p in passages[:k]]
    cache = JudgmentCache.of(store, judge.identity, event)
    ps[:k] = cache.ps(query, texts)
    misses = [i for i in range(k) if ps[i] is None]
    day = event_day(event)
    store.incr(f"utility_probes{SEP}cache", k - len(misses), day=day)
    if not misses:
        return ps, None
    results = await asyncio.gather(
        *(probe(query, texts[i]) for i in misses), return_exceptions=True
    )
    got: list[tuple[str, float]] = []
    how: dict[str, int] = {}
    lasting: str | None = None
    passing: JudgeError | None = None
    for i, r in zip(misses, results, strict=True):
        if isinstance(r, utility.Reading):
            ps[i] = r.p
            got.append((texts[i], r.p))
            how[r.how] = how.get(r.how, 0) + 1
        elif r is None:
            lasting = lasting or "no_logprobs"
        elif isinstance(r, JudgeError) and r.retryable:
            passing = passing or r
        elif isinstance(r, JudgeError):
            lasting = lasting or r.reason
        else:
            raise r
    for name, n in how.items():
        store.incr(f"utility_probes{SEP}{name}", n, day=day)
    cache.keep_ps(query, got)
    if lasting is None and passing is not None:
        if not last_try:
            raise passing  # UDCG can still be had: the event is tried again
        lasting = passing.reason
    return ps, lasting
