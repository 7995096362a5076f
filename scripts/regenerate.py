#!/usr/bin/env python3
"""Regenerate every generated file of ragmon from its single source; `--check` lists stale ones.

| generated | source |
| --- | --- |
| `grafana/dashboards/*.json` | `scripts/grafana_quality.py`, `grafana_operations.py` |
| `grafana/provisioning/alerting/ragmon-alerts.yml` | `deploy/prometheus/rules/*.yml` |
| `grafana/provisioning/datasources/ragmon.yml` | `DATASOURCE_UID` in `grafana_panels.py` |
| `deploy/kubernetes/prometheusrule.yaml` | `deploy/prometheus/rules/*.yml` |
| `monitor/demo/data/*.jsonl` | `monitor/demo/kb.py` via `monitor/demo/build_data.py` |
| the metrics table of `docs/metrics.md` | `monitor/core/catalog.py` (and `measure_table.py`) |
| the table of where each measure goes in `docs/measures.md` | `monitor/core/measure_table.py` |

Run it after editing any source; `tests/test_generated.py` runs `--check`, which exits 1 naming
every stale file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import build_grafana  # noqa: E402
import prometheusrule  # noqa: E402

from ragmon.core import catalog  # noqa: E402
from ragmon.core.measure_table import MEASURES  # noqa: E402
from ragmon.demo import build_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS_RULE = ROOT / "deploy" / "kubernetes" / "prometheusrule.yaml"
METRICS_DOC = ROOT / "docs" / "metrics.md"
MEASURES_DOC = ROOT / "docs" / "measures.md"
TABLE_HEAD = "| metric | type | labels | meaning |"
MEASURES_HEAD = "| key | measure | better | histogram on `/metrics` |"


def with_table(page: str, head: str, table: str) -> str:
    """`page` with the table whose header row starts with `head` replaced by `table`."""
    lines = page.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], table, *lines[end:]])


def with_metrics_table(page: str) -> str:
    """`page` with the metrics table replaced by the catalog's."""
    return with_table(page, TABLE_HEAD, catalog.markdown_table())


def measures_table() -> str:
    """Where each measure of `measure_table.py` goes: /metrics, the report, the explorer."""
    rows = [
        MEASURES_HEAD + " weekly report | explorer sort | needs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for m in MEASURES:
        histogram = f"`ragmon_retrieval_{m.key}`" if m.histogram else "— (stored with the event)"
        rows.append(
            f"| `{m.key}` | {m.name} | {m.better or '— (an indicator)'} | {histogram} | "
            f"{'yes' if m.report else '—'} | {'yes' if m.explore else '—'} | "
            f"{f'`{m.needs}`' if m.needs else '—'} |"
        )
    return "\n".join(rows)


def rendered() -> dict[Path, str]:
    """Every generated file and its exact content."""
    files = build_grafana.rendered()
    files[PROMETHEUS_RULE] = prometheusrule.render(build_grafana.load_rule_groups())
    files |= {build_data.DATA_DIR / name: text for name, text in build_data.files().items()}
    files[METRICS_DOC] = with_metrics_table(METRICS_DOC.read_text(encoding="utf-8"))
    measures_page = MEASURES_DOC.read_text(encoding="utf-8")
    files[MEASURES_DOC] = with_table(measures_page, MEASURES_HEAD, measures_table())
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    return [
        path
        for path, text in files.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    files = rendered()
    old = stale(files)
    if args.check:
        if old:
            print(
                "out of date (run python scripts/regenerate.py):",
                *(p.relative_to(ROOT) for p in old),
                sep="\n  ",
            )
            return 1
        return 0
    for path in old:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"{len(files) - len(old)} of {len(files)} generated files were already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
