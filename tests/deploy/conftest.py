"""Shared helpers for the deploy checks: the repository's deploy files, parsed, and the real CLI."""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the deploy files")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "kubernetes"
PROMETHEUS_DIR = DEPLOY / "prometheus"
SCHEMAS = Path(__file__).resolve().parent / "schemas"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, environ: Mapping[str, str]) -> str:
    """Compose-style ${VAR}, ${VAR:-default}, ${VAR-default} with the given environment."""

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m["name"], m["op"], m["arg"]
        if op in (":-", ":?"):
            return environ.get(name) or (arg if op == ":-" else "")
        if op in ("-", "?"):
            return environ.get(name, arg if op == "-" else "")
        return environ.get(name, "")

    return _VAR.sub(sub, value)


def cli_parser() -> argparse.ArgumentParser:
    """The real `ragmon` argparse parser; skip while ragmon.cli has no build_parser()."""
    try:
        from ragmon import cli
    except ImportError as exc:
        pytest.skip(f"ragmon.cli not importable yet ({exc}); CLI checks skipped")
    if not hasattr(cli, "build_parser"):
        pytest.skip("ragmon.cli.build_parser() does not exist yet; CLI checks skipped")
    parser = cli.build_parser()
    _no_abbreviations(parser)
    return parser


def _no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """A deploy file must spell flags in full: `--with-schedule` would pass argparse's prefix
    matching today and break the day a second flag shares the prefix."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _no_abbreviations(sub)


def parse_ragmon(argv: Sequence[str], where: str) -> argparse.Namespace:
    """Parse a deploy file's `ragmon ...` command with the real CLI, failing with context."""
    argv = list(argv)
    assert argv and argv[0] == "ragmon", f"{where}: command does not start with ragmon: {argv}"
    parser = cli_parser()
    try:
        return parser.parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{where}: `{' '.join(argv)}` is not accepted by ragmon's CLI")


def which_or_skip(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} not installed; this check needs it")
    return path
