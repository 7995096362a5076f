"""The installed distributions an extra of ragmon needs, read from this environment's metadata."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def project(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def needed_distributions(requirements: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions that `requirements` need, transitively, by name (one this
    environment lacks raises: scripts/test installs `.[dev]` again when pyproject.toml moves)."""
    found: dict[str, tuple[metadata.Distribution, frozenset[str]]] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        dist = metadata.distribution(req.name)
        name = dist.metadata["Name"].lower().replace("_", "-")
        extras = found[name][1] if name in found else frozenset()
        if name in found and set(req.extras) <= extras:
            continue
        extras |= set(req.extras)
        found[name] = (dist, extras)
        for spec in dist.requires or ():
            sub = Requirement(spec)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in {"", *extras}):
                todo.append(sub)
    return {name: dist for name, (dist, _) in found.items()}


def server_install(root: Path = ROOT) -> dict[str, metadata.Distribution]:
    """What `pip install '.[server]'` installs besides ragmon: its core and server requirements."""
    p = project(root)
    return needed_distributions([*p["dependencies"], *p["optional-dependencies"]["server"]])
