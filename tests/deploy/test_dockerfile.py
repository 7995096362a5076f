"""deploy/Dockerfile and /.dockerignore, checked without a Docker engine.

The instructions are parsed and held against the CLI and the compose file; the build stage is
replayed for real: the files the .dockerignore lets into the context are copied to a temporary
directory, the wheel is built from them, and the CLI is imported from that wheel alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import DOCKERFILE, ROOT, parse_ragmon

DOCKERIGNORE = ROOT / ".dockerignore"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def final_stage() -> list[tuple[str, str]]:
    return stages()[-1]


def args_of(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for ins, rest in stage if ins == word]


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """Docker's .dockerignore rules: last match wins, `!` re-includes, `**` spans directories."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pat = line.lstrip("!").strip("/")
        regex = ""
        i = 0
        while i < len(pat):
            if pat.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif pat.startswith("**", i):
                regex += ".*"
                i += 2
            elif pat[i] == "*":
                regex += "[^/]*"
                i += 1
            elif pat[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(pat[i])
                i += 1
        patterns.append((include, re.compile(regex)))
    return patterns


def in_context(relpath: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = relpath.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for include, regex in patterns:
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not include
    return not excluded


def test_multi_stage_build_and_a_slim_final_image():
    all_stages = stages()
    assert len(all_stages) >= 2, "multi-stage: build the wheel apart from the runtime image"
    for stage in all_stages:
        assert "slim" in stage[0][1] or "${PYTHON_VERSION}-slim" in stage[0][1], stage[0]
    runtime = final_stage()
    assert not args_of(runtime, "COPY"), "the runtime stage installs wheels, never copies sources"
    run = " ".join(args_of(runtime, "RUN"))
    assert "--mount=type=bind,from=build" in run and "--no-index" in run
    # the core install is the SDK alone: the image needs the server extra, built and installed
    assert "'ragmon[server]'" in run
    assert "'.[server]'" in " ".join(args_of(all_stages[0], "RUN"))
    assert "build-essential" not in run and "gcc" not in run


def test_runs_as_a_numeric_non_root_user():
    (user,) = args_of(final_stage(), "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric, so runAsNonRoot can verify it"
    assert f"--uid {uid}" in " ".join(args_of(final_stage(), "RUN"))


def test_default_command_serves_the_api_and_healthcheck_hits_healthz():
    (cmd,) = args_of(final_stage(), "CMD")
    argv = json.loads(cmd)
    args = parse_ragmon(argv, "Dockerfile CMD")
    assert args.command == "serve" and args.host == "0.0.0.0"
    (expose,) = args_of(final_stage(), "EXPOSE")
    assert int(expose) == args.port
    (check,) = args_of(final_stage(), "HEALTHCHECK")
    assert "curl" not in check and "wget" not in check, "the slim image has neither"
    probe = json.loads(check[check.index("CMD") + 3 :].strip())
    assert probe[0] == "python" and "urllib.request" in probe[-1]
    assert f"http://127.0.0.1:{args.port}/healthz" in probe[-1]


@pytest.mark.process
def test_healthcheck_probe_fails_when_nothing_listens():
    """The probe's exit status is what Docker reads: it must be non-zero on a dead API."""
    (check,) = args_of(final_stage(), "HEALTHCHECK")
    probe = json.loads(check[check.index("CMD") + 3 :].strip())
    from tests.support.stack import free_port

    code = probe[-1].replace(":8000/", f":{free_port()}/")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert out.returncode != 0


def test_build_context_holds_the_sources_and_no_secrets():
    patterns = dockerignore_patterns()
    for ins, rest in instructions():
        if ins == "COPY" and "--from" not in rest:
            *sources, _dest = rest.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
                assert in_context(src, patterns), f"COPY {src}: excluded by .dockerignore"
    for secret in (".env", ".venv/bin/python", ".git/config", "tests/conftest.py", "reports/x"):
        assert not in_context(secret, patterns), f"{secret} would enter the build context"
    assert not in_context("monitor/__pycache__/cli.cpython-311.pyc", patterns)
    assert in_context("monitor/cli.py", patterns)


def context_files() -> list[Path]:
    patterns = dockerignore_patterns()
    files = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = [d for d in dirnames if d not in {".git", ".venv"}]
        for name in filenames:
            if in_context(rel_dir + name, patterns):
                files.append(Path(rel_dir + name))
    return files


def in_wheel(rel: Path) -> str:
    """Where a source file lands in the wheel: `monitor/` is the import package `ragmon`,
    `workers/` is `ragmon.workers` (pyproject's package-dir)."""
    top, *rest = rel.parts
    return "/".join(["ragmon", *rest] if top == "monitor" else ["ragmon", "workers", *rest])


@pytest.mark.slow
def test_the_build_stage_makes_a_wheel_that_runs_the_cli(tmp_path):
    if not (ROOT / "monitor" / "cli.py").is_file():
        pytest.skip("monitor/cli.py does not exist yet")
    context = tmp_path / "context"
    files = context_files()  # once: other work may add files to the tree meanwhile
    for rel in files:
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, context / rel)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        # With build isolation, as `pip wheel` in the Dockerfile does (fetches setuptools).
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "--wheel-dir", str(wheels), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("ragmon-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "ragmon = ragmon.cli:main" in zf.read(entry_points).decode()
    for rel in files:
        if rel.suffix == ".py" and rel.parts[0] in {"monitor", "workers"}:
            assert in_wheel(rel) in names, f"{rel} is in the context but not in the wheel"
    for rel in files:
        if rel.match("monitor/demo/data/*.jsonl") or rel.match("monitor/templates/*.*"):
            assert in_wheel(rel) in names, f"package data {rel} missing from the wheel"

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    probe = (
        "import ragmon, ragmon.cli, ragmon.api, ragmon.workers.worker; "
        "print(ragmon.__file__); "
        "ragmon.cli.build_parser().parse_args(['serve', '--host', '0.0.0.0']); "
        # the pages' templates load from the installed package data
        "from ragmon.core.pages import message; from ragmon.templates import render; "
        "assert '<p id=message>&lt;b&gt;</p>' in render(message('t', '<b>'))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(target)), "imported the repo, not the wheel"
