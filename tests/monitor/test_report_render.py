"""The report renders: Markdown structure, self-contained HTML, and a real headless Chromium."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from monitor.report import plots
from monitor.report.analyze import Report, analyze
from monitor.report.document import Doc, to_html, to_markdown
from monitor.report.gather import Dataset
from monitor.report.render import build
from monitor.report.window import windows
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


def test_markdown_order_and_content(rendered: tuple[Report, Path, str]) -> None:
    report, _, md = rendered
    heads = re.findall(r"^## (.+)$", md, flags=re.M)
    assert heads[0] == "Biggest regressions" and heads[-1] == "How to read this report"
    assert md.startswith(f"# {report.title}\n")
    table = md[md.index("| # |") :].splitlines()
    assert table[2].startswith("| 1 | shop/kb-1/bm25 | ")
    assert "dense" not in md[: md.index("## Plots")]


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


@pytest.mark.slow
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
    # the regression row's red marker (#c92a2a) is on the first screen
    red = (top[..., 0] > 0.7) & (top[..., 1] < 0.25) & (top[..., 2] < 0.25)
    assert red.sum() > 50
