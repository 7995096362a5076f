"""Pictures of ragmon's two Grafana dashboards for docs/grafana.md (docs/img/*.png).

Grafana cannot run where ragmon is built, so this runs the *same queries* as every panel of the
dashboards (read from grafana/dashboards/*.json) against a real Prometheus and draws each panel
with matplotlib at its place in the dashboard's grid: time series, heatmaps, stats, the
scorecard table, bar gauges, text and row headers. It starts everything itself from a
repository checkout with the test harness (hence its place in tests/, not scripts/): a Redis,
`ragmon serve` and two `ragmon worker`s (tests/support/stack.py) judging with the LLM judge
against the fake OpenAI-compatible server (tests/support/fake_llm.py: grades by the lexical
rule, with logprobs, so UDCG is measured), Debian's `prometheus` scraping them every second
with ragmon's rules (tests/grafana/prometheus_server.py), and a live feed of the demo traffic
(three retrievers; `bm25` regresses half-way through, as in `ragmon demo`).

Time is compressed: a few minutes of traffic instead of days, so the averaging window is one
minute instead of an hour, and panels that compare with a week ago have no data. Usage:
`python -m tests.grafana.render_dashboards [--minutes 8]`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt

from ragmon.demo import traffic
from tests.grafana.prometheus_server import PrometheusServer
from tests.support.fake_llm import FakeLLM
from tests.support.stack import RedisServer, Stack

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
VARS = {"$app": ".*", "$index": ".*", "$retriever": ".*", "$segment": ".*", "$job": "ragmon"}
PICTURES = {"quality.png": "ragmon-quality", "operations.png": "ragmon-operations"}
ROW_INCHES = 0.3  # one grid unit of height (Grafana: 30 px); the 24 columns span WIDTH_INCHES
WIDTH_INCHES = 20.0


def load_dashboards() -> dict[str, dict[str, Any]]:
    dashboards = {}
    for path in (ROOT / "grafana" / "dashboards").glob("*.json"):
        d = json.loads(path.read_text())
        dashboards[d["uid"]] = d
    return dashboards


def expand(expr: str, win: str, span: str) -> str:
    """The panel's query with the dashboard's variables as the picture sets them."""
    for k, v in {**VARS, "$window": win, "$__rate_interval": "30s", "$__range": span}.items():
        expr = expr.replace(k, v)
    return expr


def feed(stack: Stack, stop: threading.Event, regress_at: float, per_second: float) -> None:
    """Demo events at a steady rate, with their intended grades; bm25 regresses at `regress_at`.

    Half-way through the second half a burst of 1500 events shows the queue and the lag
    rising, and from then on a client sends one invalid request per cycle (rejections).
    """
    texts = {p["id"]: p["text"] for p in traffic.load_kb()}
    queries = traffic.load_queries()
    rng = random.Random(7)
    i = 0
    burst_at = regress_at + (regress_at - time.monotonic()) / 2
    burst_done = False
    while not stop.is_set():
        batch = []
        n = max(1, round(per_second * 2))
        if not burst_done and time.monotonic() >= burst_at:
            n, burst_done = n + 1500, True
        if burst_done:
            stack.client.post("/v1/retrievals", json={"query": "missing k and passages"})
        for _ in range(n):
            retriever = traffic.RETRIEVERS[i % 3]
            degraded = time.monotonic() >= regress_at
            e = traffic.make_event(
                rng.choice(queries), texts, retriever, seed=f"pic:{i}", degraded=degraded
            )
            batch.append(e)
            i += 1
        stack.post(batch)
        stop.wait(2.0)


def draw(ax: Any, prom: PrometheusServer, panel: dict, start: float, end: float, win: str) -> None:
    """A time series or heatmap panel: its queries over the feed, one line per series."""
    step = 5.0
    kind = panel["type"]
    ax.set_title(panel["title"], fontsize=9, loc="left")
    unit = panel["fieldConfig"]["defaults"].get("unit")
    for t in panel["targets"]:
        body = prom.query_range(expand(t["expr"], win, win), start, end, step)
        series = body["data"]["result"]
        if kind == "heatmap":
            if series:
                _heatmap(ax, series, start)
            else:
                no_data(ax)
            return
        for s in sorted(series, key=lambda s: json.dumps(s["metric"], sort_keys=True)):
            xs = [(float(v[0]) - start) / 60 for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            legend = legend_of(t.get("legendFormat") or "", s["metric"])
            ax.plot(xs, ys, label=legend or None, linewidth=1.2)
    if not ax.lines:
        no_data(ax)
        return
    if unit == "percentunit":
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("minutes", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="best")


def no_data(ax: Any) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, "No data", ha="center", va="center", fontsize=9, color="grey",
            transform=ax.transAxes)  # fmt: skip


def instant(prom: PrometheusServer, expr: str, end: float) -> list[tuple[dict, float]]:
    body = prom.query(expr, at=end)
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def shown(value: float, unit: str | None) -> str:
    if value != value:  # NaN: no events in the range
        return "No data"
    if unit == "percentunit":
        return f"{value:.1%}"
    if unit in {"short", "none", None} and (value == int(value) or abs(value) >= 100):
        return f"{value:,.0f}"
    if unit == "currencyUSD":
        return f"${value:,.2f}"
    if unit in {"reqps", "ops"}:
        return f"{value:.1f}/s"
    if unit == "s":
        return f"{value:.3g} s"
    return f"{value:.3f}"


def draw_instant(ax: Any, prom: PrometheusServer, panel: dict, end: float, win: str,
                 span: str) -> None:  # fmt: skip
    """A stat, table or bar gauge panel: its instant queries at the end of the feed."""
    ax.set_title(panel["title"], fontsize=9, loc="left")
    ax.set_xticks([])
    ax.set_yticks([])
    unit = panel["fieldConfig"]["defaults"].get("unit")
    results = [
        (t.get("legendFormat") or "", instant(prom, expand(t["expr"], win, span), end))
        for t in panel["targets"]
    ]
    if not any(rows for _, rows in results):
        no_data(ax)
        return
    if panel["type"] == "stat":
        values = [shown(v, unit) for _, rows in results for _, v in rows]
        ax.text(0.5, 0.42, "  ".join(values), ha="center", va="center", fontsize=18,
                transform=ax.transAxes)  # fmt: skip
    elif panel["type"] == "table":  # one column per query, one row per retriever
        names = sorted({m.get("retriever", "") for _, rows in results for m, _ in rows})
        cells = [
            [name]
            + [
                next((shown(v, None) for m, v in rows if m.get("retriever", "") == name), "")
                for _, rows in results
            ]
            for name in names
        ]
        table = ax.table(cellText=cells, colLabels=["retriever"] + [h for h, _ in results],
                         loc="center", cellLoc="center")  # fmt: skip
        table.auto_set_font_size(False)
        table.set_fontsize(8)
    else:  # bargauge: one bar per series
        bars = [(legend_of(h, m), v) for h, rows in results for m, v in rows]
        ax.barh([b[0] for b in bars], [b[1] for b in bars], color="tab:orange")
        ax.tick_params(labelsize=7)


def legend_of(template: str, metric: dict) -> str:
    """Grafana's legend: `{{label}}` filled from the series, left empty when it has none."""
    for key, value in metric.items():
        template = template.replace("{{" + key + "}}", value)
    return re.sub(r"\{\{[^}]*\}\}", "", template)


def draw_text(ax: Any, panel: dict, width: float) -> None:
    ax.set_title(panel["title"], fontsize=9, loc="left")
    ax.set_xticks([])
    ax.set_yticks([])
    content = panel.get("options", {}).get("content", "").replace("**", "").replace("`", "")
    lines = [
        wrapped
        for paragraph in content.splitlines()
        for wrapped in (textwrap.wrap(paragraph, int(width * 14)) or [""])
    ]
    ax.text(0.02, 0.97, "\n".join(lines), ha="left", va="top", fontsize=6.5,
            transform=ax.transAxes)  # fmt: skip


def _heatmap(ax: Any, series: list[dict], start: float) -> None:
    """Cumulative `le` buckets per step -> counts per band, drawn as an image."""
    by_le = sorted(series, key=lambda s: float(s["metric"]["le"]))
    les = [float(s["metric"]["le"]) for s in by_le]
    times = [float(v[0]) for v in by_le[0]["values"]] if by_le else []
    cum = [[float(v[1]) for v in s["values"]] for s in by_le]
    bands = [[c - (cum[i - 1][j] if i else 0.0) for j, c in enumerate(row)]
             for i, row in enumerate(cum)]  # fmt: skip
    finite = [i for i, le in enumerate(les) if le != float("inf")]
    image = [bands[i] for i in finite]
    # Like the panel's colour scale (exponent 0.5); the top 2% clipped so a burst of
    # traffic does not wash out the rest.
    values = sorted(v for row in image for v in row)
    vmax = max(values[int(0.98 * (len(values) - 1))], 1e-9) if values else 1.0
    norm = matplotlib.colors.PowerNorm(gamma=0.5, vmin=0.0, vmax=vmax)
    right = (times[-1] - start) / 60 if times else 1.0
    ax.imshow(image, aspect="auto", origin="lower", cmap="Oranges", interpolation="nearest",
              norm=norm, extent=(0, right, 0, len(finite)))  # fmt: skip
    ticks = list(range(0, len(finite), 4))
    ax.set_yticks([t + 0.5 for t in ticks], [f"≤{les[finite[t]]:g}" for t in ticks], fontsize=7)
    ax.set_xlabel("minutes", fontsize=8)
    ax.tick_params(labelsize=8)


def opened(top: list[dict]) -> list[dict]:
    """Every panel at its place with every collapsed row open (Grafana keeps a collapsed row's
    panels laid out below it; the rows after it move down by their height)."""
    out, shift = [], 0
    for p in sorted(top, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        out.append({**p, "gridPos": {**p["gridPos"], "y": p["gridPos"]["y"] + shift}})
        inner = p.get("panels") or []
        if p["type"] == "row" and inner:
            for q in inner:
                out.append({**q, "gridPos": {**q["gridPos"], "y": q["gridPos"]["y"] + shift}})
            shift += max(q["gridPos"]["y"] + q["gridPos"]["h"] for q in inner) - (
                p["gridPos"]["y"] + 1
            )
    return out


def render(prom: PrometheusServer, start: float, end: float, win: str, out: Path) -> list[Path]:
    """Every panel of each dashboard, at its place in the dashboard's 24-column grid."""
    dashboards = load_dashboards()
    span = f"{round(end - start)}s"  # the dashboard's time range: the whole feed
    written = []
    for name, uid in PICTURES.items():
        d = dashboards[uid]
        panels = opened(d["panels"])
        header = 0.9  # inches for the picture's title
        rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
        height = header + rows * ROW_INCHES
        fig = plt.figure(figsize=(WIDTH_INCHES, height))
        drawn = 0
        for p in panels:
            g = p["gridPos"]
            left, width = g["x"] / 24, g["w"] / 24
            top = 1 - (header + g["y"] * ROW_INCHES) / height
            box = g["h"] * ROW_INCHES / height
            p = {**p, "title": p["title"].replace("$window", win)}
            if p["type"] == "row":
                fig.text(left + 0.004, top - box / 2, p["title"], fontsize=11, weight="bold",
                         va="center")  # fmt: skip
                continue
            ax = fig.add_axes((left + 0.03 * width + 0.012, top - box + 0.45 / height,
                               width * 0.97 - 0.02, box - 0.75 / height))  # fmt: skip
            if p["type"] in {"timeseries", "heatmap"}:
                draw(ax, prom, p, start, end, win)
            elif p["type"] == "text":
                draw_text(ax, p, g["w"] / 24 * WIDTH_INCHES)
            else:
                draw_instant(ax, prom, p, end, win, span)
            drawn += 1
        fig.suptitle(
            f"{d['title']}: all {drawn} panels, their queries run on a real Prometheus and drawn"
            f" with matplotlib (not Grafana).\nDemo traffic for {(end - start) / 60:.0f} minutes,"
            " judged by a fake OpenAI-compatible server; bm25 regresses at minute"
            f" {(end - start) / 120:.0f}; window {win}; no data a week ago",
            fontsize=11,
            y=1 - 0.3 / height,
        )
        path = out / name
        fig.savefig(path, dpi=72)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=8.0, help="length of the live feed")
    parser.add_argument("--rate", type=float, default=3.0, help="events per second")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    redis_server = RedisServer().start()
    llm = FakeLLM(latency=0.05).start()
    judge = {"RAGMON_JUDGE": "openai", "OPENAI_BASE_URL": llm.url, "OPENAI_API_KEY": "sk-fake"}
    stack = Stack(redis_server.url, workers=2, env={**judge, "RAGMON_UTILITY": "on"}).start()
    prom = PrometheusServer(f"127.0.0.1:{stack.port}").start()
    stop = threading.Event()
    try:
        start = time.time()
        duration = args.minutes * 60
        regress_at = time.monotonic() + duration / 2
        thread = threading.Thread(target=feed, args=(stack, stop, regress_at, args.rate))
        thread.start()
        time.sleep(duration)
        stop.set()
        thread.join()
        time.sleep(5)
        end = time.time()
        m = stack.metrics()
        workers = ["alive" if w.poll() is None else f"exited {w.returncode}" for w in stack.workers]
        print(
            f"workers: {workers}; /metrics:",
            *[line for line in m.splitlines() if line.startswith("ragmon_events_")],
        )
        for path in render(prom, start, end, "1m", args.out):
            print(f"wrote {path}")
    finally:
        stop.set()
        prom.stop()
        stack.stop()
        llm.stop()
        redis_server.stop()
        redis_server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
