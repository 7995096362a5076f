"""A new user's first hour, from a fresh clone, with only the commands the README shows.

Step 1 of the README (virtualenv, activate, install, `ragmon demo`) runs as written in bash; a
second shell activates the venv as the README says and runs `ragmon --version`; Ctrl-C
(SIGINT to the foreground process group, as a terminal sends it) stops the demo. The second
test runs the command the demo prints (its report) in a second shell, beside a smaller demo in
this test environment.

pip resolves `.[server]` offline, from this test environment: a folder links exactly the
installed distributions `ragmon[server]` needs (and the build's setuptools), on PYTHONPATH, so
pip finds them installed and builds ragmon without an index, and an import the extra does not
provide fails as on a new machine. Resolving the extra from the package index is scripts/test's
own install (`.[dev]` holds `[server]`); the compiled wheels come from it, compiled once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import psutil
import pytest

from tests.support.distributions import needed_distributions, server_install
from tests.support.stack import clean_env

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

pytestmark = pytest.mark.slow


def first_command() -> str:
    """The first command of the README's first bash block (step 1)."""
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block, "the README starts with a bash block"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[0]


def fresh_clone(dest: Path) -> Path:
    """The repository's tracked files as they are now (what a clone of this commit holds)."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def link_packages(dists: dict[str, metadata.Distribution], folder: Path) -> Path:
    """Symlinks to each distribution's top-level files and folders (the members of a shared
    namespace folder such as `google/`, which other distributions also fill)."""
    for dist in dists.values():
        site = Path(str(dist.locate_file("")))
        for file in dist.files or ():
            parts = Path(str(file)).parts
            if parts[0] in ("..", "__pycache__") or parts[0].endswith(".pth"):
                continue  # scripts, byte code of top-level modules, .pth hooks
            top = site / parts[0]
            shared = top.is_dir() and len(parts) > 2 and not (top / "__init__.py").exists()
            shared = shared and not parts[0].endswith((".dist-info", ".libs", ".data"))
            rel = Path(*parts[: 2 if shared else 1])
            if (site / rel).exists() and not (folder / rel).exists():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).symlink_to(site / rel)
    return folder


def new_machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh clone and the environment of a new user's shell, its `pip install` offline."""
    repo = fresh_clone(tmp_path / "ragmon")
    build = tomllib.loads((repo / "pyproject.toml").read_text())["build-system"]["requires"]
    dists = {**server_install(repo), **needed_distributions(build)}
    packages = link_packages(dists, tmp_path / "server-packages")
    env = clean_env()  # no REDIS_URL, no OpenAI key: as on a new machine
    for name in ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join(
        p
        for p in env["PATH"].split(os.pathsep)
        if ".venv" not in p  # not the test's venv
    )
    env["PYTHONPATH"] = str(packages)
    env["PIP_NO_INDEX"] = "1"
    env["PIP_NO_BUILD_ISOLATION"] = "false"  # pip reads a `no-` option inverted: isolation off
    return repo, env


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`command` in a new bash, as a user types it in a second terminal."""
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def start_demo(command: str, repo: Path, env: dict[str, str]) -> tuple[subprocess.Popen, list[str]]:
    """`command` (ending in `ragmon demo`) in bash, in a process group of its own as a
    terminal's foreground job; its output up to the hint it prints once it serves."""
    demo = subprocess.Popen(
        ["bash", "-c", command],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out: list[str] = []
    assert demo.stdout is not None and demo.stderr is not None
    for line in demo.stdout:  # the summary, then the hint, then it serves
        out.append(line.rstrip("\n"))
        if line.startswith("  REDIS_URL="):
            return demo, out
    stop(demo)
    err = demo.stderr.read()[-3000:]
    pytest.fail(f"the demo never printed its hint:\n{chr(10).join(out)}\n{err}")


def stop(demo: subprocess.Popen) -> None:
    """Ctrl-C, then SIGKILL if the demo has not ended: on Ctrl-C it stops its workers and its
    Redis, which run in sessions of their own and would outlive a killed process group."""
    if demo.poll() is None:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)


def test_readme_walkthrough_from_a_fresh_clone(tmp_path):
    repo, env = new_machine(tmp_path)
    step1 = first_command()
    assert step1.endswith("ragmon demo") and ". .venv/bin/activate" in step1
    demo, out = start_demo(step1, repo, env)
    try:
        text = "\n".join(out)
        done = re.search(r"(\d+)/(\d+) events judged", text)
        assert done and done.group(1) == done.group(2), text
        rows = {ln.split()[0]: ln.split() for ln in out if ln.strip()}
        ndcg = {r: float(rows[r][3]) for r in ("bm25", "dense-v1", "hybrid-v2")}
        assert ndcg["hybrid-v2"] > ndcg["bm25"] > ndcg["dense-v1"], text  # as the data intends
        serving = re.search(r"Serving (http://127\.0\.0\.1:\d+)/metrics until Ctrl-C", text)
        assert serving, text

        # The hint names the bare `ragmon`, which works in an activated shell (the second test
        # runs it).
        hint = out[-1].strip()
        assert re.fullmatch(r"REDIS_URL=unix://\S+ ragmon report --out reports/", hint), hint
        assert "ragmon report --out reports/" in README
        activate = ". .venv/bin/activate"
        assert f"activate it first: `{activate}`" in README

        assert "`ragmon --version`" in README
        version = shell(f"{activate} && ragmon --version", repo, env)
        assert re.fullmatch(r"ragmon \d+\.\d+\.\S+\n", version.stdout), version

        import httpx

        metrics = httpx.get(f"{serving.group(1)}/metrics", timeout=30).text
        assert "ragmon_retrieval_ndcg_bucket" in metrics
        assert f"event explorer: {serving.group(1)}/ui" in text
        explorer = httpx.get(f"{serving.group(1)}/ui/events", params={"retriever": "bm25"})
        assert explorer.status_code == 200 and "support-bot: kb-2026-10/bm25/" in explorer.text

        started = psutil.Process(demo.pid).children(recursive=True)
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C, as the README says
        code = demo.wait(60)
        assert demo.stderr is not None
        err = demo.stderr.read()
    finally:
        stop(demo)
    assert code == 0, err[-2000:]
    assert "stopping (SIGINT)" in err and "Traceback" not in err
    # Orphans finish on their own: multiprocessing's resource tracker exits once the demo's end
    # of its pipe closes, a moment after the demo itself. Ten seconds is far more than that.
    _, alive = psutil.wait_procs(started, timeout=10)
    left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(p.cmdline()) for p in left]


def test_the_command_the_demo_prints_writes_the_report_in_a_second_shell(tmp_path):
    """A smaller demo (the hint is the same) in this test environment's virtualenv, activated
    as the README says, then the hint in a new shell that activates it too: the report of the
    demo's traffic, read from the demo's embedded Redis."""
    env = clean_env()
    for name in ("VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    activate = f". {ROOT / '.venv' / 'bin' / 'activate'}"
    options = "--days 8 --per-day 10 --workers 1 --port 0"
    demo, out = start_demo(f"{activate} && ragmon demo {options}", tmp_path, env)
    try:
        started = psutil.Process(demo.pid).children(recursive=True)
        hint = out[-1].strip()
        assert re.fullmatch(r"REDIS_URL=unix://\S+ ragmon report --out reports/", hint), hint
        report = shell(f"{activate} && {hint}", tmp_path, env)
        assert report.returncode == 0, report.stderr[-2000:]
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C: the demo stops its workers and Redis
        code = demo.wait(60)
    finally:
        stop(demo)
    assert code == 0
    _, alive = psutil.wait_procs(started, timeout=10)
    left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(p.cmdline()) for p in left]
    assert "bm25" in (tmp_path / "reports" / "report.html").read_text()
    assert "## Biggest regressions" in (tmp_path / "reports" / "report.md").read_text()
