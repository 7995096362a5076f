"""`/metrics`: a prometheus_client collector that reads ragmon's aggregates from Redis at scrape.

Workers record observations in Redis (RQ forks a process per job, so in-process metrics would be
lost); this collector turns them into metric families named as in `ragmon.core.catalog`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from ragmon.core import catalog
from ragmon.core.anchor import WATCH_REASONS, drift, watch_state
from ragmon.core.drift import Interval
from ragmon.core.wire import SEP, field_parts, series_values
from ragmon.oversight import LAST, summarized, summarized_agreement
from ragmon.store import Histogram, Store
from ragmon.store.judge_state import Budget
from ragmon.store.keys import utc_day


def _le(bound: float) -> str:
    return repr(float(bound))


def _histogram_family(m: catalog.Metric, series: dict[tuple[str, ...], Histogram]) -> Metric:
    fam = HistogramMetricFamily(m.name, m.help, labels=list(m.labels))
    for labels, h in sorted(series.items()):
        if len(labels) != len(m.labels):
            continue
        cumulative, running = [], 0
        for bound, n in zip(m.buckets, h.buckets, strict=False):
            running += n
            cumulative.append((_le(bound), running))
        cumulative.append(("+Inf", h.count))
        fam.add_metric(list(labels), cumulative, h.sum)
        if m.buckets[0] < 0:
            # prometheus_client drops _sum/_count when a bucket bound is negative (an OpenMetrics
            # rule); T can be negative and its mean needs them, and the text format allows them.
            names = dict(zip(m.labels, labels, strict=True))
            fam.samples += [
                Sample(f"{m.name}_count", names, h.count),
                Sample(f"{m.name}_sum", names, h.sum),
            ]
    return fam


def _series_histogram_text(m: catalog.Metric, series: dict[tuple[str, ...], Histogram]) -> str:
    """`_histogram_family` written straight as exposition text: at 500 series the quality
    histograms are ~100k lines, and building them as prometheus_client samples took most of
    a scrape's second (docs/performance.md). Label values are label-pattern checked at ingest,
    so they need no escaping."""
    help_text = m.help.replace("\\", "\\\\").replace("\n", "\\n")
    out = [f"# HELP {m.name} {help_text}\n# TYPE {m.name} histogram\n"]
    les = [f'le="{_le(b)}"' for b in m.buckets]
    for labels, h in sorted(series.items()):
        if len(labels) != len(m.labels):
            continue
        names = ",".join(f'{k}="{v}"' for k, v in zip(m.labels, labels, strict=True))
        running = 0  # counts are whole numbers: written as such (Prometheus reads `5` as 5.0)
        for le, n in zip(les, h.buckets, strict=False):
            running += n
            out.append(f"{m.name}_bucket{{{names},{le}}} {running}\n")
        count = str(h.count)
        out.append(f'{m.name}_bucket{{{names},le="+Inf"}} {count}\n')
        out.append(f"{m.name}_count{{{names}}} {count}\n{m.name}_sum{{{names}}} ")
        out.append(f"{floatToGoString(h.sum)}\n")
    return "".join(out)


def _per_series(m: catalog.Metric) -> bool:
    return m.type == "histogram" and m.labels == catalog.SERIES_LABELS


class RagmonCollector:
    """Builds every ragmon metric family from the store at collection time; with `series`
    False it leaves out the per-series histograms, which `metrics_text` writes itself."""

    def __init__(self, store: Store, series: bool = True) -> None:
        self.store = store
        self.series = series
        self.hists: dict[str, dict[tuple[str, ...], Histogram]] = {}
        self.metrics = catalog.with_bounds(store.bounds)

    def collect(self) -> Iterator[Metric]:
        counters = self.store.counters()
        hist_metrics = [m for m in self.metrics if m.type == "histogram"]
        self.hists = hists = self.store.histograms({m.key: m.buckets for m in hist_metrics})
        for m in self.metrics:
            if m.type == "histogram":
                if self.series or not _per_series(m):
                    yield _histogram_family(m, hists.get(m.key, {}))
            elif m.of:
                fam = CounterMetricFamily(m.name, m.help, labels=list(m.labels))
                for labels, h in sorted(hists.get(m.of, {}).items()):
                    if h.sum_squares is not None and len(labels) == len(m.labels):
                        fam.add_metric(list(labels), h.sum_squares)
                yield fam
            elif m.type == "counter":
                fam = CounterMetricFamily(m.name, m.help, labels=list(m.labels))
                if not m.labels:
                    fam.add_metric([], counters.get(m.key, 0))
                else:
                    prefix = m.key + SEP
                    for field, value in sorted(counters.items()):
                        if field.startswith(prefix):
                            values = field_parts(field[len(prefix) :])
                            if len(values) == len(m.labels):
                                fam.add_metric(values, value)
                yield fam
        yield GaugeMetricFamily(
            "ragmon_queue_depth", catalog.BY_NAME["ragmon_queue_depth"].help,
            value=self.store.queue_depth(),
        )  # fmt: skip
        yield self.distinct_queries(hists.get("signal_results", {}))
        yield from self.alert_settings()
        yield GaugeMetricFamily(
            "ragmon_jobs_waiting_retry", catalog.BY_NAME["ragmon_jobs_waiting_retry"].help,
            value=self.store.retrying_jobs(),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "ragmon_judge_budget_exhausted",
            catalog.BY_NAME["ragmon_judge_budget_exhausted"].help,
            value=1.0 if self.budget_exhausted() else 0.0,
        )
        yield from self.judging()
        yield from self.sampling()
        yield from self.memory()

    def memory(self) -> Iterator[Metric]:
        """The sampling mode, the ledger's bytes per app and class, its forecast, and Redis'
        own memory figures (`ragmon.store.ledger.Memory`)."""
        fams = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
                for m in catalog.MEMORY}  # fmt: skip
        mode = self.store.settings.sampling
        for m in ("fixed", "planned"):
            fams["ragmon_sampling_mode"].add_metric([m], 1.0 if m == mode else 0.0)
        if mode == "fixed":
            fams["ragmon_sampling_fixed_rate"].add_metric([], self.store.settings.sample_rate)
        memory = self.store.ledger.memory(time.time())
        for app, by_kind in sorted(memory.reading.held.items()):
            for kind, n in sorted(by_kind.items()):
                fams["ragmon_memory_held_bytes"].add_metric([app, kind.value], n)
        for app in sorted(memory.reading.forecast):
            fams["ragmon_memory_forecast_bytes"].add_metric([app], memory.reading.forecast_by(app))
        fams["ragmon_memory_forecast_total_bytes"].add_metric([], memory.forecast)
        fams["ragmon_redis_used_memory_bytes"].add_metric([], memory.used)
        fams["ragmon_redis_maxmemory_bytes"].add_metric([], memory.maxmemory)
        fams["ragmon_redis_evicting"].add_metric([], 1.0 if memory.evicting else 0.0)
        yield from fams.values()

    def distinct_queries(self, series: dict[tuple[str, ...], Histogram]) -> Metric:
        """Today's distinct queries of each series with signals (their HyperLogLogs)."""
        m = catalog.BY_NAME["ragmon_signal_queries_distinct"]
        fam = GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
        labels = sorted(x for x in series if len(x) == len(m.labels))
        counts = self.store.distinct_queries(utc_day(time.time()), [SEP.join(x) for x in labels])
        for x, n in zip(labels, counts, strict=True):
            fam.add_metric(list(x), n)
        return fam

    def sampling(self) -> Iterator[Metric]:
        """The day's spend and the current plan: its pace, when the budget would run out, and
        each series' rate (with RAGMON_SAMPLING=fixed, the fixed rate and its forecast)."""
        fams = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
                for m in catalog.SAMPLING}  # fmt: skip
        now = time.time()
        judge = self.store.judge_state()
        fams["ragmon_judge_spend_today_usd"].add_metric([], judge.spent(utc_day(now)))
        by_app = judge.spent_by_app(utc_day(now))
        budgets = self.store.settings.app_daily_budget_usd
        for app in sorted(by_app.keys() | (budgets.keys() - {"*"})):
            fams["ragmon_judge_app_spend_today_usd"].add_metric([app], by_app.get(app, 0.0))
            if (limit := self.store.settings.app_daily_budget(app)) > 0:
                fams["ragmon_judge_app_budget_usd"].add_metric([app], limit)
        stored = self.store.sampling.load(now)
        if stored is not None:
            fams["ragmon_sampling_pace"].add_metric([], stored.pace)
            runout = stored.runout if stored.runout is not None else math.inf
            fams["ragmon_sampling_budget_runout_timestamp_seconds"].add_metric([], runout)
            for series, rate in sorted(stored.rates.items()):
                labels = list(series_values(series))
                if len(labels) == len(catalog.SERIES_LABELS):
                    fams["ragmon_sampling_rate"].add_metric(labels, rate)
        yield from fams.values()

    def alert_settings(self) -> Iterator[Metric]:
        """The quality alerts' tunables, from ragmon's settings: the rules read them here, so
        Prometheus' and Grafana's copies follow one configuration."""
        s = self.store.settings
        margin = GaugeMetricFamily(
            "ragmon_alert_drop_margin",
            catalog.BY_NAME["ragmon_alert_drop_margin"].help,
            labels=["measure"],
        )
        margin.add_metric(["ndcg"], s.alert_margin_ndcg)
        margin.add_metric(["t"], s.alert_margin_t)
        yield margin
        for name, value in (
            ("ragmon_alert_drop_z", s.alert_z),
            ("ragmon_alert_min_events", s.alert_min_events),
        ):
            yield GaugeMetricFamily(name, catalog.BY_NAME[name].help, value=value)

    def judging(self) -> Iterator[Metric]:
        """Agreement with people (and the second judge) per app and judge identity, and the
        last 7 days' corrected estimates per series (`ragmon.oversight`)."""
        fams = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
                for m in catalog.JUDGING}  # fmt: skip

        def bounds(name: str, labels: list[str], interval: Interval | None) -> None:
            if interval is not None:
                for bound in ("estimate", "low", "high"):
                    fams[name].add_metric([*labels, bound], getattr(interval, bound))

        for (app, judge, reference), a in summarized_agreement(self.store).items():
            who = [app, judge, reference]
            fams["ragmon_judge_agreement_pairs"].add_metric(who, a.pairs)
            bounds("ragmon_judge_agreement_exact", who, a.exact)
            bounds("ragmon_judge_agreement_quadratic_kappa", who, a.kappa)
            bounds("ragmon_judge_agreement_unweighted_kappa", who, a.kappa_unweighted)
            bounds("ragmon_judge_agreement_difference", who, a.difference)
            for r, row in enumerate(a.confusion):
                for j, n in enumerate(row):
                    fams["ragmon_judge_agreement_confusion"].add_metric([*who, str(r), str(j)], n)
        for series in summarized(self.store, LAST)[2]:
            for measure, c in series.measures.items():
                where = [*series.labels.values(), measure]
                if c.judge_only is not None:
                    fams["ragmon_estimate_judge_only"].add_metric(where, c.judge_only)
                fams["ragmon_estimate_human_labels"].add_metric(where, c.labels)
                bounds("ragmon_estimate_corrected", where, c.estimate)
                if c.effective_labels is not None and c.estimate is not None:
                    fams["ragmon_estimate_effective_labels"].add_metric(where, c.effective_labels)
        yield from fams.values()
        yield from self.anchor()

    def anchor(self) -> Iterator[Metric]:
        """The anchor set's latest complete re-judging and its judge identity's baseline."""
        fams = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
                for m in catalog.ANCHOR}  # fmt: skip
        found = drift(self.store.anchors.runs())
        if found is not None:
            latest, baseline = found
            judge = [latest["judge"]]
            for name, values in (
                ("ragmon_judge_anchor_kappa", latest["kappa"]),
                ("ragmon_judge_anchor_baseline_kappa", baseline["kappa"]),
                ("ragmon_judge_anchor_difference", latest["difference"]),
            ):
                for bound, value in (values or {}).items():
                    fams[name].add_metric([*judge, bound], value)  # fmt: skip
            fams["ragmon_judge_anchor_passages"].add_metric(judge, latest["graded"])
            at = datetime.fromisoformat(latest["at"].replace("Z", "+00:00")).timestamp()
            fams["ragmon_judge_anchor_run_timestamp_seconds"].add_metric(judge, at)
        runs = self.store.anchors.runs()
        last = runs[-1] if runs else None
        every = self.store.settings.anchor_every_hours * 3600.0
        why = watch_state(last, every, time.time())
        for reason in WATCH_REASONS:
            fams["ragmon_judge_anchor_blind"].add_metric([reason], float(reason == why))
        if last is not None:
            fams["ragmon_judge_anchor_set_passages"].add_metric([], last.get("passages", 0))
            fams["ragmon_judge_anchor_set_questions"].add_metric([], last.get("questions", 0))
        yield from fams.values()

    def budget_exhausted(self) -> bool:
        return Budget(self.store.judge_state(), self.store.settings.daily_budget_usd).exhausted()


def make_registry(store: Store) -> CollectorRegistry:
    """A registry with only ragmon's collector, every family built by prometheus_client: the
    reference `metrics_text` is tested against."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RagmonCollector(store))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def metrics_text(store: Store, between: Callable[[], None] | None = None) -> bytes:
    """What /metrics serves: the same samples as `render(make_registry(store))`, faster
    (the per-series histograms written directly, the rest by prometheus_client). `between` is
    called after each per-series family (the renderer paces itself with it)."""
    collector = RagmonCollector(store, series=False)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    head = generate_latest(registry)
    parts = []
    for m in collector.metrics:
        if _per_series(m):
            parts.append(_series_histogram_text(m, collector.hists.get(m.key, {})))
            if between is not None:
                between()
    return head + "".join(parts).encode()
