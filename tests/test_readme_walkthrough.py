"""A new user's first hour, from a fresh clone, with only the commands the README shows.

Step 1 of the README (virtualenv, activate, install, `ragmon demo`) runs as written in bash; a
second shell activates the venv as the README says and runs the command the demo prints; Ctrl-C
(SIGINT to the foreground process group, as a terminal sends it) stops the demo.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

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


def shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`command` in a new bash, as a user types it in a second terminal."""
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_readme_walkthrough_from_a_fresh_clone(tmp_path):
    repo = fresh_clone(tmp_path / "ragmon")
    env = clean_env()  # no REDIS_URL, no OpenAI key: as on a new machine
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        p
        for p in env["PATH"].split(os.pathsep)
        if ".venv" not in p  # not the test's venv
    )
    step1 = first_command()
    assert step1.endswith("ragmon demo") and ". .venv/bin/activate" in step1
    demo = subprocess.Popen(
        ["bash", "-c", step1],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    out: list[str] = []
    try:
        for line in demo.stdout:  # the summary, then the hint, then it serves
            out.append(line.rstrip("\n"))
            if line.startswith("  REDIS_URL="):
                break
        else:
            err = demo.stderr.read()
            if "Could not find a version" in err or "No matching distribution" in err:
                pytest.skip(f"no package index reachable: {err[-300:]}")
            pytest.fail(f"the demo never printed its hint:\n{chr(10).join(out)}\n{err[-3000:]}")
        text = "\n".join(out)
        done = re.search(r"(\d+)/(\d+) events judged", text)
        assert done and done.group(1) == done.group(2), text
        rows = {ln.split()[0]: ln.split() for ln in out if ln.strip()}
        ndcg = {r: float(rows[r][3]) for r in ("bm25", "dense-v1", "hybrid-v2")}
        assert ndcg["hybrid-v2"] > ndcg["bm25"] > ndcg["dense-v1"], text  # as the data intends
        serving = re.search(r"Serving (http://127\.0\.0\.1:\d+)/metrics until Ctrl-C", text)
        assert serving, text

        # The hint names the bare `ragmon`, which works in an activated shell.
        hint = out[-1].strip()
        assert re.fullmatch(r"REDIS_URL=unix://\S+ ragmon report --out reports/", hint), hint
        assert "ragmon report --out reports/" in README
        activate = ". .venv/bin/activate"
        assert f"activate it first: `{activate}`" in README
        report = shell(f"{activate} && {hint}", repo, env)
        assert report.returncode == 0, report.stderr[-2000:]
        html = (repo / "reports" / "report.html").read_text()
        assert "bm25" in html

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
        err = demo.stderr.read()
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
    assert code == 0, err[-2000:]
    assert "stopping (SIGINT)" in err and "Traceback" not in err
    # Orphans finish on their own: multiprocessing's resource tracker exits once the demo's end
    # of its pipe closes, a moment after the demo itself. Ten seconds is far more than that.
    _, alive = psutil.wait_procs(started, timeout=10)
    left = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [" ".join(p.cmdline()) for p in left]
