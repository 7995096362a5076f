"""`ragmon calibrate FILE`: how far the configured judge agrees with known grades.

Reads rankings that carry known grades (the TREC DL file of ../shared/data/trec-dl, or ragmon's
own JSONL events with `passages[].grade`), grades their top 2K passages with the judge ragmon
is configured to use, exactly as the workers would (each (query, passage) once, as with the
judgment cache), and prints:

- Cohen's kappa, binary at RAGMON_RELEVANT_GRADE and quadratic-weighted on 0-3, with the
  Landis & Koch reading, raw agreement and the judge's grade bias;
- the 4x4 confusion matrix (rows: known grade, columns: judge grade);
- each measure's mean per retriever under the known grades and under the judge's grades, and
  Kendall's tau-b between the two orders of the retrievers, twice: on the shared pool (only
  passages both sides graded: a passage the known grades never judged is a pool gap, not a
  judge error) with a 95% bootstrap interval over queries, and with every judge grade (what
  ragmon reports in production).

Agreement uses only passages that have a known grade; for the measures with known grades a
passage without one counts as not relevant (the TREC convention).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from monitor.measure_table import MEASURES as TABLE
from monitor.measures import MeasureParams, compute
from monitor.settings import Settings
from workers.grading import on_both_scales
from workers.judges.base import Judge, JudgeError

if TYPE_CHECKING:
    from monitor.store import Store

TREC_K = 10  # the TREC file holds each run's top 20: K = 10 so that 2K = 20 are judged
QUERY_CONCURRENCY = 8  # queries graded at once (the judge's own semaphore bounds the calls)
MEASURES = tuple((m.key, m.name) for m in TABLE if m.calibrate)
# Stop: every further call would fail the same (a connection error comes after all retries).
FATAL = {"budget_exhausted", "client_error", "connection_error"}


@dataclass
class Record:
    """One ranking with known grades: `passages` are (id, text, known grade or None)."""

    query: str
    k: int
    retriever: str
    passages: list[tuple[str, str, int | None]]

    @property
    def depth(self) -> int:
        return min(len(self.passages), 2 * self.k)


@dataclass
class Outcome:
    """Judge grades by (query, text), and what went wrong."""

    grades: dict[tuple[str, str], int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed_records: int = 0
    stopped: str | None = None


# ---- input ----------------------------------------------------------------------------------


def parse_record(obj: dict) -> Record:
    """A TREC DL line (`hits[].grade`) or a ragmon event (`passages[].grade`)."""
    if "hits" in obj:
        passages = [
            (str(h.get("docid", h.get("rank"))), h["text"], h.get("grade")) for h in obj["hits"]
        ]
        return Record(
            obj["query"], min(TREC_K, len(passages)), str(obj.get("run", "default")), passages
        )
    if "passages" in obj:
        passages = [(str(p["id"]), p["text"], p.get("grade")) for p in obj["passages"]]
        labels = obj.get("labels") or {}
        return Record(
            obj["query"], int(obj["k"]), str(labels.get("retriever", "default")), passages
        )
    raise ValueError("neither a TREC DL record (hits) nor a ragmon event (passages)")


def load_records(path: Path, limit: int | None = None) -> list[Record]:
    """Records of a JSONL file; a bad line stops with its line number."""
    out: list[Record] = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = parse_record(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
            for _, _, g in record.passages:
                if g is not None and (type(g) is not int or not 0 <= g <= 3):
                    raise ValueError(f"{path}:{n}: known grade {g!r} is not 0-3 or null")
            out.append(record)
            if limit is not None and len(out) >= limit:
                break
    return out


# ---- agreement statistics (pure) ------------------------------------------------------------


def confusion(known: Sequence[int], judged: Sequence[int], n: int = 4) -> list[list[int]]:
    """n x n counts: rows the known grade, columns the judge's."""
    m = [[0] * n for _ in range(n)]
    for a, b in zip(known, judged, strict=True):
        m[a][b] += 1
    return m


def weighted_kappa(matrix: Sequence[Sequence[int]], weights: str = "none") -> float:
    """Cohen's kappa of a confusion matrix: unweighted, `linear` or `quadratic` weights.

    kappa = 1 - sum(w * observed) / sum(w * expected), w_ij = disagreement weight; NaN when
    expected disagreement is 0 (both raters used one category only).
    """
    n = len(matrix)
    total = sum(sum(row) for row in matrix)
    if total == 0:
        return math.nan
    rows = [sum(row) for row in matrix]
    cols = [sum(matrix[i][j] for i in range(n)) for j in range(n)]

    def w(i: int, j: int) -> float:
        if weights == "quadratic":
            return ((i - j) / (n - 1)) ** 2
        if weights == "linear":
            return abs(i - j) / (n - 1)
        return 0.0 if i == j else 1.0

    observed = sum(w(i, j) * matrix[i][j] for i in range(n) for j in range(n)) / total
    expected = sum(w(i, j) * rows[i] * cols[j] for i in range(n) for j in range(n)) / total**2
    return 1.0 - observed / expected if expected > 0 else math.nan


def binary_kappa(known: Sequence[int], judged: Sequence[int], relevant_grade: int) -> float:
    """Cohen's kappa of relevant (grade >= relevant_grade) versus not."""
    return weighted_kappa(
        confusion(
            [int(g >= relevant_grade) for g in known],
            [int(g >= relevant_grade) for g in judged],
            n=2,
        )
    )


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either list handled); NaN when a list is constant."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(xs)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denom if denom else math.nan


TAU_BOOTSTRAP = 1000  # resamples of the queries for Kendall tau's interval


PerQuery = dict[str, dict[str, list[tuple[float, float]]]]  # query -> retriever -> (known, judge)


def _order_tau(per_query: PerQuery, weights: dict[str, int]) -> float:
    """Kendall tau between the retrievers' mean measure with known and with judge grades, the
    queries counted `weights` times."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for q, w in weights.items():
        for retriever, pairs in per_query[q].items():
            acc = sums[retriever]
            acc[0] += w * sum(p[0] for p in pairs)
            acc[1] += w * sum(p[1] for p in pairs)
            acc[2] += w * len(pairs)
    names = [r for r in sorted(sums) if sums[r][2]]
    if len(names) < 2:
        return math.nan
    return kendall_tau(
        [sums[r][0] / sums[r][2] for r in names], [sums[r][1] / sums[r][2] for r in names]
    )


def tau_with_interval(
    per_query: PerQuery, n_boot: int = TAU_BOOTSTRAP, seed: int = 0, conf: float = 0.95
) -> tuple[float, float, float]:
    """Kendall tau of the retrievers' order and its percentile bootstrap interval over queries
    (a query's records move together: the retrievers are compared on the same questions)."""
    import random

    queries = sorted(per_query)
    tau = _order_tau(per_query, dict.fromkeys(queries, 1))
    if len(queries) < 2 or math.isnan(tau):
        return tau, math.nan, math.nan
    rng = random.Random(seed)
    draws = []
    for _ in range(n_boot):
        weights: dict[str, int] = defaultdict(int)
        for q in rng.choices(queries, k=len(queries)):
            weights[q] += 1
        t = _order_tau(per_query, weights)
        if not math.isnan(t):
            draws.append(t)
    if not draws:
        return tau, math.nan, math.nan
    draws.sort()
    lo = draws[int((1 - conf) / 2 * (len(draws) - 1))]
    hi = draws[int((1 + conf) / 2 * (len(draws) - 1))]
    return tau, lo, hi


def landis_koch(kappa: float) -> str:
    """The usual words for a kappa (Landis & Koch, 1977)."""
    if math.isnan(kappa):
        return "undefined"
    for bound, word in ((0.0, "poor"), (0.2, "slight"), (0.4, "fair"), (0.6, "moderate"),
                        (0.8, "substantial")):  # fmt: skip
        if kappa <= bound:
            return word
    return "almost perfect"


# ---- judging ----------------------------------------------------------------------------------


class Progress:
    """One stderr line every few seconds (long LLM runs)."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 2.0) -> None:
        self.total, self.stream, self.every_s = total, stream or sys.stderr, every_s
        self.done = self.judged = self.failed = 0
        self.started = self.last = time.monotonic()

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            print(
                f"calibrate: {self.done}/{self.total} records, {self.judged} passages judged, "
                f"{self.failed} records failed, {now - self.started:.0f} s",
                file=self.stream,
                flush=True,
            )


async def judge_records(
    records: Sequence[Record], judge: Judge, progress: Progress | None = None
) -> Outcome:
    """Grade every record's top 2K: each distinct (query, text) once, queries concurrently."""
    out = Outcome()
    by_query: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_query[r.query].append(r)
    gate = asyncio.Semaphore(QUERY_CONCURRENCY)

    async def one_query(query: str, recs: list[Record]) -> None:
        async with gate:
            for r in recs:
                if out.stopped:
                    return
                todo: dict[str, str] = {}
                for pid, text, _ in r.passages[: r.depth]:
                    if (query, text) not in out.grades and text not in todo.values():
                        todo[pid] = text
                if todo:
                    try:
                        grades = await judge.grade(query, list(todo.items()))
                    except JudgeError as exc:
                        out.failures[exc.reason] += 1
                        out.failed_records += 1
                        if exc.reason in FATAL:
                            out.stopped = f"{exc.reason}: {exc}"
                        if progress:
                            progress.failed += 1
                    else:
                        # a utility5 judge's 1-5 grades, compared on the known grades' 0-3
                        umbrela = on_both_scales(list[int | None](grades), judge)[0]
                        for text, g in zip(todo.values(), umbrela, strict=True):
                            assert g is not None  # the judge grades every passage asked
                            out.grades[(query, text)] = g
                        if progress:
                            progress.judged += len(todo)
                if progress:
                    progress.done += 1
                    progress.tick()

    await asyncio.gather(*(one_query(q, rs) for q, rs in by_query.items()))
    if progress:
        progress.tick(force=True)
    return out


# ---- the report --------------------------------------------------------------------------------


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def analyse(records: Sequence[Record], outcome: Outcome, params: MeasureParams) -> dict[str, Any]:
    """Agreement and per-retriever measures (a dict, printed by `render`)."""
    known: list[int] = []
    judged: list[int] = []
    unknown = 0
    seen: set[tuple[str, str]] = set()
    per_retriever: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    # measure -> query -> retriever -> (known, judge): on the shared pool, and with every grade
    shared: dict[str, PerQuery] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    every: dict[str, PerQuery] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    complete = 0
    for r in records:
        top = r.passages[: r.depth]
        jg = [outcome.grades.get((r.query, text)) for _, text, _ in top]
        for (_, text, kg), g in zip(top, jg, strict=True):
            if g is None or (r.query, text) in seen:
                continue
            seen.add((r.query, text))
            if kg is None:
                unknown += 1
            else:
                known.append(kg)
                judged.append(g)
        if any(g is None for g in jg):
            continue  # the judge failed on this record: no measures
        complete += 1
        known_top = [kg for _, _, kg in top]
        mk = compute(known_top, r.k, params)
        mj = compute(jg, r.k, params)
        # the shared pool: a passage without a known grade is unjudged on both sides
        ms = compute([g if kg is not None else None for g, kg in zip(jg, known_top, strict=True)],
                     r.k, params)  # fmt: skip
        for key, _ in MEASURES:
            a, b, c = mk[key], mj[key], ms[key]
            if a is not None and b is not None:
                per_retriever[r.retriever][key].append((a, b))
                every[key][r.query][r.retriever].append((a, b))
            if a is not None and c is not None:
                shared[key][r.query][r.retriever].append((a, c))
    matrix = confusion(known, judged)
    n = len(known)
    rel = params.relevant_grade
    result: dict[str, Any] = {
        "pairs": n,
        "judged_without_known": unknown,
        "records_measured": complete,
        "confusion": matrix,
        "kappa_binary": binary_kappa(known, judged, rel),
        "kappa_quadratic": weighted_kappa(matrix, "quadratic"),
        "exact_agreement": sum(matrix[i][i] for i in range(4)) / n if n else math.nan,
        "mean_known": sum(known) / n if n else math.nan,
        "mean_judge": sum(judged) / n if n else math.nan,
        "relevant_known": sum(g >= rel for g in known) / n if n else math.nan,
        "relevant_judge": sum(g >= rel for g in judged) / n if n else math.nan,
        "retrievers": {},
        "tau": {},
        "tau_shared": {},
    }
    names = sorted(per_retriever)
    for key, _ in MEASURES:
        means = {}
        for name in names:
            pairs = per_retriever[name][key]
            if pairs:
                means[name] = (
                    sum(p[0] for p in pairs) / len(pairs),
                    sum(p[1] for p in pairs) / len(pairs),
                    len(pairs),
                )
        result["retrievers"][key] = means
        if len(means) >= 2:
            result["tau"][key] = _order_tau(every[key], dict.fromkeys(every[key], 1))
            result["tau_shared"][key] = tau_with_interval(shared[key])
    return result


def render(res: dict[str, Any], head: Sequence[str], relevant_grade: int) -> str:
    lines = list(head)
    lines += [
        "",
        f"## Agreement on {res['pairs']} (query, passage) pairs with a known grade",
        f"({res['judged_without_known']} more were judged but have no known grade)",
        "",
        f"Cohen's kappa, binary (relevant = grade >= {relevant_grade}): "
        f"{_fmt(res['kappa_binary'])}  ({landis_koch(res['kappa_binary'])})",
        f"Cohen's kappa, quadratic-weighted 0-3:        {_fmt(res['kappa_quadratic'])}  "
        f"({landis_koch(res['kappa_quadratic'])})",
        f"exact agreement on 0-3: {_fmt(res['exact_agreement'])}; "
        f"mean grade known {_fmt(res['mean_known'], 2)}, judge {_fmt(res['mean_judge'], 2)}; "
        f"share relevant known {_fmt(res['relevant_known'], 2)}, "
        f"judge {_fmt(res['relevant_judge'], 2)}",
        "",
        "Confusion matrix (rows: known grade, columns: judge grade)",
        "",
        "| known \\ judge | 0 | 1 | 2 | 3 | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    m = res["confusion"]
    for i in range(4):
        lines.append(f"| {i} | " + " | ".join(str(x) for x in m[i]) + f" | {sum(m[i])} |")
    cols = [sum(m[i][j] for i in range(4)) for j in range(4)]
    lines.append("| total | " + " | ".join(str(c) for c in cols) + f" | {sum(cols)} |")
    lines += [
        "",
        f"## Measures per retriever ({res['records_measured']} records; mean with known "
        "grades -> mean with the judge's grades)",
        "",
    ]
    retrievers = sorted({r for means in res["retrievers"].values() for r in means})
    lines.append(
        "| measure | " + " | ".join(retrievers) + " | Kendall tau, shared pool [95% CI] | "
        "Kendall tau, every judge grade |"
    )
    lines.append("| --- | " + " | ".join("---" for _ in retrievers) + " | ---: | ---: |")
    for key, label in MEASURES:
        means = res["retrievers"].get(key, {})
        cells = [
            f"{means[r][0]:.3f} -> {means[r][1]:.3f}" if r in means else "n/a" for r in retrievers
        ]
        tau, lo, hi = res["tau_shared"].get(key, (math.nan, math.nan, math.nan))
        shared = f"{_fmt(tau, 2)} [{_fmt(lo, 2)}, {_fmt(hi, 2)}]"
        lines.append(
            f"| {label} | " + " | ".join(cells) + f" | {shared} | {_fmt(res['tau'].get(key), 2)} |"
        )
    lines += [
        "",
        "Kendall tau compares the order of the retrievers by the measure's mean with known grades "
        "and with the judge's: 1 = same order, 0 = unrelated, -1 = reversed. On the shared pool "
        "only passages with a known grade count on both sides (a passage nobody labelled is a gap "
        "in the labels, not a judge error); the interval resamples the queries "
        f"({TAU_BOOTSTRAP} times). The last column uses every judge grade, as ragmon does in "
        "production. With few retrievers tau takes few values and its interval is wide.",
    ]
    return "\n".join(lines)


def _make_judge(settings: Settings) -> tuple[Judge, Store | None]:
    if settings.judge == "lexical":
        from workers.judges.lexical import LexicalJudge

        return LexicalJudge(), None
    from workers.judges.llm import OpenAIJudge

    store: Store | None = None
    if settings.redis_url:  # the fleet's rate limits, budget and cost counters
        from monitor.store import Store

        store = Store.connect(settings)
    return OpenAIJudge(settings, store), store


def run_calibrate(
    file: str | Path, settings: Settings, limit: int | None = None, out: TextIO = sys.stdout
) -> int:
    """The `ragmon calibrate FILE [--limit N]` command; returns the exit code."""
    path = Path(file)
    if settings.judge == "openai" and not settings.judge_configured:
        print(
            "ragmon calibrate: no LLM judge configured. Set OPENAI_API_KEY (and OPENAI_BASE_URL "
            "for a compatible server) and RAGMON_JUDGE_MODEL, or RAGMON_JUDGE=lexical.",
            file=sys.stderr,
        )
        return 2
    try:
        records = load_records(path, limit)
    except (OSError, ValueError) as exc:
        print(f"ragmon calibrate: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(f"ragmon calibrate: no records in {path}", file=sys.stderr)
        return 2
    for name in ("httpx", "httpx2", "openai"):  # one INFO line per HTTP call drowns the report
        logging.getLogger(name).setLevel(logging.WARNING)
    judge, store = _make_judge(settings)
    if settings.judge == "openai":
        from workers.judges.probe import probe_judge

        probe = probe_judge(settings, store)
        if probe.fatal:  # every call would fail the same way: say so now, not after retries
            print(f"ragmon calibrate: {probe.message}", file=sys.stderr)
            if store is not None:
                store.close()
            return 1

    async def go() -> Outcome:
        try:
            return await judge_records(records, judge, Progress(len(records)))
        finally:
            await judge.aclose()

    started = time.monotonic()
    outcome = asyncio.run(go())
    elapsed = time.monotonic() - started
    res = analyse(records, outcome, settings.measure_params())
    head = [
        f"# ragmon calibrate: judge `{judge.model}` (prompt {judge.prompt_version}) "
        f"against the known grades of {path.name}",
        "",
        f"{len(records)} records, {len({r.query for r in records})} queries, "
        f"{len({r.retriever for r in records})} retrievers; {len(outcome.grades)} distinct "
        f"passages judged in {elapsed:.1f} s",
    ]
    spent = getattr(judge, "accounting", None)  # an LLM judge's totals
    if spent is not None and spent.calls:
        head.append(
            f"judge calls: {spent.calls}, tokens in {spent.usage_in}, out {spent.usage_out}"
        )
    if outcome.failed_records:
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(outcome.failures.items()))
        head.append(f"FAILED: {outcome.failed_records} records not judged ({reasons})")
    if outcome.stopped:
        head.append(f"STOPPED early: {outcome.stopped}")
    print(render(res, head, settings.relevant_grade), file=out)
    if store is not None:
        store.close()
    return 1 if outcome.stopped or res["pairs"] == 0 else 0
