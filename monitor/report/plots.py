"""Plots of the report as base64 PNGs (matplotlib's object API: no pyplot global state)."""

from __future__ import annotations

import base64
import io

from matplotlib.artist import Artist
from matplotlib.figure import Figure

from ragmon.core.measures import BUCKETS
from ragmon.report.analyze import Report
from ragmon.report.compare import MEASURES, NAMES, OPTIONAL, Group, Row, group_name

MAX_OVERLAYS = 6
MAX_LINES = 10  # series per trend plot: tab10 has 10 distinct colours; more get small multiples
_COLS = 3
_BASE_COLOR, _CUR_COLOR = "#8a8f98", "#d9480f"


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _grid(n: int, row_height: float) -> tuple[Figure, list]:
    """A figure with `n` panels, three per row (unused cells hidden)."""
    rows = -(-n // _COLS)
    fig = Figure(figsize=(12, row_height * rows), layout="constrained")
    axes = list(fig.subplots(rows, _COLS, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes


def _short(label: str) -> str:
    """`2026-W47` stays; `2026-11-17..2026-11-23` becomes `11-23`."""
    return label.split("..")[-1][5:] if ".." in label else label


def trend_chunks(report: Report) -> list[list[Group]]:
    """The retrievers of the 8-week trend in plots of at most `MAX_LINES` each, of equal size,
    the regressed ones first: within a plot every line has its own colour."""
    seen = {g for by in report.trend.values() for g in by}
    order = [r.group for r in report.regressions if r.group in seen]
    order += sorted(g for g in seen if g not in order)
    if not order:
        return [[]]
    n = -(-len(order) // MAX_LINES)
    size = -(-len(order) // n)
    return [order[i : i + size] for i in range(0, len(order), size)]


def trend_figure(report: Report, groups: list[Group] | None = None) -> Figure:
    """Weekly means of each measure per retriever over the last 8 weeks (of `groups`, at most
    `MAX_LINES`; default all), one colour of tab10 per retriever."""
    if groups is None:
        groups = [g for chunk in trend_chunks(report) for g in chunk]
    if len(groups) > MAX_LINES:
        raise ValueError(f"{len(groups)} series in one trend plot: split with trend_chunks")
    colours = [f"C{i}" for i in range(MAX_LINES)]  # the default tab10 cycle, explicitly
    measured = {
        m for m, by in report.trend.items() for vs in by.values() if any(v is not None for v in vs)
    }
    panels = [m for m in MEASURES if m in measured or m not in OPTIONAL]
    fig, axes = _grid(len(panels), 3.25)
    x = list(range(len(report.trend_labels)))
    ticks = [_short(lbl) for lbl in report.trend_labels]
    for ax, m in zip(axes, panels, strict=False):
        for colour, g in zip(colours, groups, strict=False):
            means = report.trend[m].get(g, [])
            pts = [(i, v) for i, v in zip(x, means, strict=True) if v is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", color=colour, label=group_name(g))
        ax.set_title(NAMES[m])
        ax.set_xticks(x, ticks, rotation=45, fontsize=7)
        ax.grid(alpha=0.3)
    legend: dict[str, Artist] = {}  # each retriever once, though the first panel may lack it
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    if legend:
        ncol = min(len(legend), 4)
        fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=ncol)
    fig.suptitle("Weekly mean per retriever (7-day blocks ending on the report's last day)")
    return fig


def trend_png(report: Report, groups: list[Group] | None = None) -> str:
    return _png(trend_figure(report, groups))


def trend_pngs(report: Report) -> dict[str, str]:
    """The trend plots by caption: one, or small multiples of at most `MAX_LINES` retrievers."""
    chunks = trend_chunks(report)
    title = "Weekly trend of each measure per retriever, last 8 weeks"
    if len(chunks) == 1:
        return {title: trend_png(report, chunks[0])}
    out, first = {}, 1
    total = sum(len(c) for c in chunks)
    for chunk in chunks:
        last = first + len(chunk) - 1
        out[f"{title} (retrievers {first}-{last} of {total})"] = trend_png(report, chunk)
        first = last + 1
    return out


def _shares(counts: list[int] | None) -> list[float] | None:
    if not counts or not sum(counts):
        return None
    total = sum(counts)
    return [c / total for c in counts]


MAX_TICKS = 7  # tick labels per distribution panel; more overlap at this size


def bins(measure: str, row: Row | None) -> list[str]:
    """Bar labels for a measure's bins: miss/hit for Hit@K; the +Inf bin only when used."""
    bounds = BUCKETS[measure]
    if measure == "hit":
        return ["miss", "hit"]
    labels = [f"≤{b:g}" for b in bounds]
    used = any(c and c[-1] for c in (row.base_counts, row.cur_counts)) if row else False
    return [*labels, f">{bounds[-1]:g}"] if used else labels


def shown_ticks(labels: list[str]) -> list[tuple[int, str]]:
    """At most `MAX_TICKS` evenly spaced (position, label) pairs: more overlap at this size."""
    step = -(-len(labels) // MAX_TICKS)
    return [(i, labels[i]) for i in range(0, len(labels), step)]


def overlay_png(rows: list[Row], group: Group) -> str:
    """This week's distribution of each measure over the baseline's, on the fixed bins."""
    by = {r.measure: r for r in rows if r.group == group}
    panels = [m for m in MEASURES if m in by or m not in OPTIONAL]
    fig, axes = _grid(len(panels), 3.0)
    for ax, m in zip(axes, panels, strict=False):
        row = by.get(m)
        ticks = bins(m, row)
        x = list(range(len(ticks)))
        for counts, color, name, off in (
            (row.base_counts if row else None, _BASE_COLOR, "baseline", -0.2),
            (row.cur_counts if row else None, _CUR_COLOR, "this week", 0.2),
        ):
            shares = _shares(counts)
            if shares:
                ax.bar([i + off for i in x], shares[: len(x)], width=0.4, color=color, label=name)
        title = NAMES[m]
        if row is not None and row.psi is not None:
            title += f"  (PSI {row.psi:.2f}, {row.psi_reading})"
        ax.set_title(title, fontsize=9)
        shown = shown_ticks(ticks)
        rotate = 35 if len(shown) < len(ticks) else 0
        ha = "right" if rotate else "center"
        positions, labels = [i for i, _ in shown], [t for _, t in shown]
        ax.set_xticks(positions, labels, fontsize=7, rotation=rotate, ha=ha)
        ax.set_ylabel("share of events", fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    handles, labels = axes[1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=2)
    fig.suptitle(f"{group_name(group)}: this week vs baseline")
    return _png(fig)


def overlay_groups(report: Report) -> list[Group]:
    """Groups to draw overlays for: the regressed ones first, then the others."""
    order = [r.group for r in report.regressions]
    order += [o.group for o in report.ops if o.group not in order]
    return order[:MAX_OVERLAYS]
