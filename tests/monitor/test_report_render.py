"""The report renders: Markdown structure, self-contained HTML, and a real headless Chromium."""

from __future__ import annotations

import base64
import io
import random
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from ragmon.core.window import windows
from ragmon.report import plots
from ragmon.report.analyze import Report, analyze, summary_line
from ragmon.report.compare import Row
from ragmon.report.document import Doc, to_html, to_markdown
from ragmon.report.gather import Dataset
from ragmon.report.ops import JudgeOps
from ragmon.report.render import _models, _sources, _spend, build
from tests.monitor.test_report import BAD, GOOD, ranked_grades, window_data

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Injected into a copy of the page only: marks how many images decoded, for --dump-dom.
PROBE = """<script>window.addEventListener('load', () => {
const imgs = [...document.images];
document.body.dataset.images = imgs.length + ':' +
  imgs.filter(i => i.complete && i.naturalWidth > 0).length;});</script>"""


def sample_report() -> Report:
    import random

    rng = random.Random(11)
    cur, base = windows(end="2026-11-22", days=7)
    week = [(r, ranked_grades(rng, GOOD)) for r in ("bm25", "dense") for _ in range(150)]
    week2 = [
        (r, ranked_grades(rng, BAD if r == "bm25" else GOOD))
        for r in ("bm25", "dense")
        for _ in range(150)
    ]
    data = Dataset(window_data(cur, week2), window_data(base, week), [], True, 35.0)
    return analyze(data)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, Path, str]:
    report = sample_report()
    images = {"trend": plots.trend_png(report)}
    for g in plots.overlay_groups(report):
        images["/".join(g)] = plots.overlay_png(report.rows, g)
    doc = build(report, images)
    out = tmp_path_factory.mktemp("render") / "report.html"
    out.write_text(to_html(doc), encoding="utf-8")
    return report, out, to_markdown(doc)


@pytest.mark.slow  # the plots take seconds to draw (the module's `rendered`)
def test_markdown_order_and_content(rendered: tuple[Report, Path, str]) -> None:
    report, _, md = rendered
    heads = re.findall(r"^## (.+)$", md, flags=re.M)
    assert heads[:2] == ["Verdict per retriever", "Biggest regressions"]
    assert heads[-1] == "How to read this report"
    assert md.startswith(f"# {report.title}\n")
    verdicts = md[md.index("| where | verdict |") :].splitlines()
    assert verdicts[2].startswith("| shop/kb-1/bm25 | regression | ")  # what needs a person first
    table = md[md.index("| # |") :].splitlines()
    assert table[2].startswith("| 1 | shop/kb-1/bm25 | ")
    regressions = md[md.index("## Biggest regressions") : md.index("## Plots")]
    assert "dense" not in regressions


@pytest.mark.slow  # the plots take seconds to draw (the module's `rendered`)
def test_html_is_self_contained(rendered: tuple[Report, Path, str]) -> None:
    _, path, _ = rendered
    page = path.read_text()
    assert not re.search(r"""(src|href)=["'](?!data:)""", page), "no external resources"
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(pngs) == 3
    for b64 in pngs:
        img = mpimg.imread(io.BytesIO(base64.b64decode(b64)), format="png")
        assert img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0.01


def test_document_escapes_html() -> None:
    doc = Doc("a <b> & c")
    doc.p("<script>alert(1)</script> `code`")
    doc.table(["<h>"], [["<td>"]])
    page = to_html(doc)
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "<code>code</code>" in page and "&lt;td&gt;" in page
    assert "\\|" in to_markdown(Doc("t", [("table", ["a|b"], [["c"]], "")]))


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    return exe


def _run(exe: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.mark.slow  # the plots take seconds to draw (the module's `rendered`)
def test_chromium_renders_report(rendered: tuple[Report, Path, str], tmp_path: Path) -> None:
    exe = _chromium()
    report, path, _ = rendered
    probe = tmp_path / "probe.html"
    probe.write_text(path.read_text().replace("</body>", PROBE + "</body>"))
    dom = _run(exe, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f"<title>{report.title}</title>" in dom.stdout
    assert 'data-images="3:3"' in dom.stdout, "every embedded plot decoded"
    first = re.search(r'<table id="regressions">.*?<tbody>\s*<tr[^>]*>(.*?)</tr>', dom.stdout, re.S)
    assert first and "bm25" in first.group(1) and "nDCG@K" in first.group(1)

    shot = tmp_path / "shot.png"
    res = _run(exe, f"--screenshot={shot}", "--window-size=1280,2000", path.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (2000, 1280)
    top = img[:400, :, :3]
    assert top.std() > 0.05, "the first screen is not blank"
    # the regressed retriever's red marker (#c92a2a) is on the first screen
    red = (top[..., 0] > 0.7) & (top[..., 1] < 0.25) & (top[..., 2] < 0.25)
    assert red.sum() > 50


# ---- plots and words a person reads correctly ----------------------------------------------------


def test_hit_bins_are_miss_and_hit_without_an_empty_inf_bin() -> None:
    row = Row(("a", "b", "c"), "hit", base_counts=[30, 70, 0], cur_counts=[40, 60, 0])
    assert plots.bins("hit", row) == ["miss", "hit"]
    ndcg = Row(("a", "b", "c"), "ndcg", base_counts=[1] * 21 + [0], cur_counts=[1] * 21 + [0])
    labels = plots.bins("ndcg", ndcg)
    assert len(labels) == 21 and labels[-1] == "≤1"  # nDCG never exceeds 1: no +Inf bar
    t = Row(("a", "b", "c"), "t", base_counts=[0] * 19 + [3], cur_counts=[0] * 20)
    assert plots.bins("t", t)[-1].startswith(">")  # a value past the last bound is drawn


def test_t_tick_labels_are_few_enough_not_to_overlap() -> None:
    labels = plots.bins("t", None)
    shown = plots.shown_ticks(labels)
    assert len(labels) > plots.MAX_TICKS >= len(shown) >= 4
    assert shown[0] == (0, labels[0])


def _judge(**kw: object) -> JudgeOps:
    return JudgeOps(None, None, None, None, **kw)  # type: ignore[arg-type]


def test_judge_spend_says_what_is_true() -> None:
    lexical = _judge(sources={"judge": 80, "cache": 20}, models={"lexical": 100})
    assert "lexical judge runs locally and costs nothing" in _spend(lexical)
    known = _judge(sources={"known": 50})
    assert "every grade was sent by the app" in _spend(known)
    unpriced = JudgeOps(None, {"my-model input": 5.0}, 0, 3, {"judge": 3}, {"my-model": 3})
    assert "RAGMON_PRICES" in _spend(unpriced)
    assert _spend(_judge()) == "not recorded"
    assert _sources(lexical) == "80% graded by the judge, 20% from the judgment cache"
    assert _models(lexical) == "`lexical` (100%)"


def test_mix_shift_is_named_and_not_a_regression() -> None:
    """Segments of different quality, each unchanged; only billing's share moves."""
    rng = random.Random(4)
    cur, base = windows(end="2026-11-22", days=7)

    def week(share_billing: float) -> list[tuple]:
        out = []
        for _ in range(600):
            billing = rng.random() < share_billing
            noise = 3.0 if billing else GOOD
            out.append(("bm25", ranked_grades(rng, noise), "billing" if billing else "howto"))
        return out

    report = analyze(
        Dataset(window_data(cur, week(0.8)), window_data(base, week(0.5)), [], True, 35.0)
    )
    ndcg = next(r for r in report.rows if r.measure == "ndcg")
    assert ndcg.change is not None and ndcg.change.total < -0.05  # the mean fell ...
    assert abs(ndcg.change.estimate) < 0.03 and ndcg.status == "unchanged"  # ... by the mix
    assert not report.regressions
    (mix,) = report.mix_shifts
    words = r"`billing` [45]\d% → [78]\d%, `howto` [45]\d% → [12]\d%"
    assert re.fullmatch(words, mix.moved_words())
    md = to_markdown(build(report, {}))
    assert "mix shift" in md and "segment mix moved" in summary_line(report)


def test_markdown_renders_no_untrusted_tag_or_link() -> None:
    """report.md holds queries and ids from the traffic: a Markdown viewer must show them, not
    run them."""
    hostile = [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click me](javascript:alert(1))",
        "<javascript:alert(1)>",
    ]
    doc = Doc("<b>title</b>")
    for text in hostile:
        doc.p(f"query: {text}")
    doc.ul(hostile)
    doc.table(["q"], [[t] for t in hostile])
    doc.p("a `<kept literally> in code` span")
    md = to_markdown(doc)
    for bad in ("<script", "<img", "<javascript:", "<b>"):
        assert bad not in md, bad
    assert not re.search(r"(?<!\\)\]\(javascript:", md)  # a link needs an unescaped ](
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "\\[click me\\](javascript:alert(1))" in md
    assert "`<kept literally> in code`" in md
