"""Pictures of ragmon's main dashboard panels for docs/grafana.md (docs/img/*.png).

Grafana cannot run where ragmon is built, so this runs the *same queries* as the dashboards'
main panels (read from grafana/dashboards/*.json) against a real Prometheus and draws them with
matplotlib. It starts everything itself from a repository checkout with the test harness
(hence its place in tests/, not scripts/): a Redis, `ragmon serve` and two `ragmon worker`s
(tests/support/stack.py), Debian's `prometheus` scraping them every second with ragmon's rules
(tests/grafana/prometheus_server.py), and a live feed of the demo traffic (three retrievers;
`bm25` regresses half-way through, as in `ragmon demo`).

Time is compressed: a few minutes of traffic instead of days, so the averaging window is one
minute instead of an hour. Usage: `python -m tests.grafana.render_dashboards [--minutes 8]`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt

from ragmon.demo import traffic
from tests.grafana.prometheus_server import PrometheusServer
from tests.support.stack import RedisServer, Stack

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
VARS = {"$app": ".*", "$index": ".*", "$retriever": ".*", "$segment": ".*", "$job": "ragmon"}
# (dashboard uid, panel title) of each picture's panels, in reading order.
PICTURES = {
    "quality.png": [
        ("ragmon-quality", "nDCG@K (mean)"),
        ("ragmon-quality", "T (mean)"),
        ("ragmon-quality", "Hit rate (mean)"),
        ("ragmon-quality", "Harm@K (mean)"),
        ("ragmon-quality", "nDCG@K by retriever"),
        ("ragmon-quality", "Precision@K by retriever"),
        ("ragmon-quality", "nDCG@K distribution"),
        ("ragmon-quality", "nDCG@K: p10 and median"),
    ],
    "operations.png": [
        ("ragmon-operations", "Events per second by outcome"),
        ("ragmon-operations", "Queue depth"),
        ("ragmon-operations", "Labelling lag percentiles"),
        ("ragmon-operations", "Grade distribution over time"),
    ],
}


def load_panels() -> dict[tuple[str, str], dict[str, Any]]:
    panels = {}
    for path in (ROOT / "grafana" / "dashboards").glob("*.json"):
        d = json.loads(path.read_text())
        for p in d["panels"]:
            panels[(d["uid"], p["title"])] = p
    return panels


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
                rng.choice(queries), texts, retriever, seed=f"pic:{i}",
                degraded=degraded, with_grades=True,
            )  # fmt: skip
            batch.append(e)
            i += 1
        stack.post(batch)
        stop.wait(2.0)


def draw(ax: Any, prom: PrometheusServer, panel: dict, start: float, end: float, win: str) -> None:
    step = 5.0
    kind = panel["type"]
    ax.set_title(panel["title"], fontsize=10, loc="left")
    unit = panel["fieldConfig"]["defaults"].get("unit")
    for t in panel["targets"]:
        expr = t["expr"]
        for k, v in {**VARS, "$window": win, "$__rate_interval": "30s", "$__range": win}.items():
            expr = expr.replace(k, v)
        body = prom.query_range(expr, start, end, step)
        series = body["data"]["result"]
        if kind == "heatmap":
            _heatmap(ax, series, start)
            return
        for s in sorted(series, key=lambda s: json.dumps(s["metric"], sort_keys=True)):
            xs = [(float(v[0]) - start) / 60 for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            legend = t.get("legendFormat") or ""
            for key, value in s["metric"].items():
                legend = legend.replace("{{" + key + "}}", value)
            ax.plot(xs, ys, label=legend or None, linewidth=1.4)
    if unit == "percentunit":
        ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("minutes", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best")


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


def render(prom: PrometheusServer, start: float, end: float, win: str, out: Path) -> list[Path]:
    panels = load_panels()
    written = []
    for name, wanted in PICTURES.items():
        cols = 4 if len(wanted) > 4 else 2
        rows = -(-len(wanted) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
        for ax, key in zip(axes.flat, wanted, strict=False):
            draw(ax, prom, panels[key], start, end, win)
        for ax in list(axes.flat)[len(wanted) :]:
            ax.axis("off")
        fig.suptitle(
            "ragmon dashboards' queries on a real Prometheus, drawn with matplotlib (not Grafana)"
            f"\ndemo traffic; bm25 regresses at minute {(end - start) / 120:.0f}; window {win}",
            fontsize=9,
        )
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=90)
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
    stack = Stack(redis_server.url, workers=2).start()
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
        redis_server.stop()
        redis_server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
