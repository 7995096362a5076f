"""`ragmon` as a user runs it: the real command, the real fault, one line that says what to fix."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from ragmon.cli import KEY_VARIABLES, build_parser, version
from ragmon.settings import env_variables
from tests.support.cli import Ragmon, run_ragmon
from tests.support.events import make_event
from tests.support.stack import RedisServer, clean_env, free_port, ragmon_env
from tests.support.waiting import scaled, wait_until

pytestmark = pytest.mark.process  # runs the `ragmon` command


def one_line(stderr: str) -> str:
    """The command's whole stderr, which must be exactly one line and no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_version_names_the_installed_package():
    r = run_ragmon(["--version"], clean_env())
    assert r.returncode == 0
    assert r.stdout.strip() == f"ragmon {version()}"
    assert version()[0].isdigit()


def test_every_option_has_help_and_the_epilog_names_real_settings():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"ragmon {name} {action.option_strings or action.dest}: no help"
    known = set(env_variables())
    assert {name for name, _ in KEY_VARIABLES} <= known
    assert {"REDIS_URL", "RAGMON_JUDGE", "OPENAI_API_KEY", "OPENAI_BASE_URL"} <= {
        name for name, _ in KEY_VARIABLES
    }
    for args in (["--help"], ["worker", "--help"], ["serve", "--help"]):
        text = run_ragmon(args, clean_env()).stdout
        for name, _ in KEY_VARIABLES:
            assert name in text, (args, name)


def test_metrics_into_a_closed_pipe_exits_quietly(tmp_path):
    """`ragmon metrics | head`: the reader is gone before ragmon writes."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ragmon.cli", "metrics"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
            cwd=tmp_path,
            timeout=60,
        )
    finally:
        os.close(write)
    assert proc.stderr == ""
    assert proc.returncode == 0


@pytest.mark.parametrize("command", [["requeue-failed"], ["report", "--out", "reports"]])
def test_a_command_with_redis_down_is_one_line(tmp_path, command):
    port = free_port()  # nothing listens there
    env = clean_env(REDIS_URL=f"redis://:s3cret@127.0.0.1:{port}/0")
    r = run_ragmon(command, env, cwd=tmp_path)
    line = one_line(r.stderr)
    assert r.returncode == 1
    assert line.startswith(
        f"ragmon {command[0]}: cannot reach Redis at redis://:***@127.0.0.1:{port}/0"
    )
    assert "Connection refused" in line and line.endswith("check REDIS_URL")
    assert "s3cret" not in r.stderr


def test_serve_on_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run_ragmon(["serve", "--port", str(port)], clean_env(RAGMON_JUDGE="lexical"))
    assert r.returncode == 2
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("ragmon serve:")]
    assert line == [
        f"ragmon serve: port {port} on 127.0.0.1 is already in use (another ragmon serve, or "
        "another program): stop it or choose another --port"
    ], r.stderr
    assert "Traceback" not in r.stderr and "Errno" not in r.stderr
    cli_doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert line[0].replace(f"port {port} ", "port 8000 ") in cli_doc  # the documented line


@pytest.mark.slow
def test_serve_with_redis_down_says_so_at_once_and_recovers(tmp_path):
    redis = RedisServer()  # its port is chosen, the server not started yet
    port = free_port()
    api = Ragmon(
        ["serve", "--port", str(port)],
        clean_env(REDIS_URL=redis.url, RAGMON_JUDGE="lexical"),
        cwd=tmp_path,
    )
    try:
        api.wait_for(rf"ragmon serve .* on http://127\.0\.0\.1:{port}: redis=redis://127\.0\.0\.1")
        (first,) = api.wait_for(r"cannot reach Redis")
        assert f"cannot reach Redis at {redis.url} (" in first
        assert "check REDIS_URL" in first and "the API answers 503" in first
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        r = client.post("/v1/retrievals", json=make_event())
        assert r.status_code == 503 and r.headers["retry-after"]
        api.wait_for(r"cannot reach Redis", count=2, timeout=15)  # one line per interval
        redis.start()
        api.wait_for(r"Redis reachable again", timeout=15)
        assert client.get("/readyz").status_code == 200
        assert client.post("/v1/retrievals", json=make_event(seed=1)).status_code == 202
        client.close()
        assert "Traceback" not in api.text()
    finally:
        api.stop()
        redis.cleanup()


@pytest.mark.parametrize("command", [["requeue-failed"], ["report", "--out", "reports"]])
def test_text_storage_off_without_a_key_is_one_line(tmp_path, command):
    env = clean_env(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", RAGMON_STORE_TEXT="false")
    r = run_ragmon(command, env, cwd=tmp_path)
    assert r.returncode == 2
    assert one_line(r.stderr).startswith("ragmon: bad configuration: RAGMON_STORE_TEXT=false")


def test_text_key_prints_a_key_that_seals_and_opens(tmp_path):
    from ragmon.setting_values import SettingsError
    from ragmon.settings import Settings
    from ragmon.store.sealing import Sealer

    def sealer(*keys: str) -> Sealer:
        env = {"RAGMON_STORE_TEXT": "false", "RAGMON_TEXT_KEYS": ",".join(keys)}
        return Sealer(Settings.from_env(env, dotenv=None))

    key, other = (run_ragmon(["text-key"], clean_env(), cwd=tmp_path).stdout.strip() for _ in "ab")
    sealed = sealer(key).seal('{"query": "q"}')
    assert sealed.startswith("fernet:") and "query" not in sealed
    assert sealer(key).open(sealed.encode()) == '{"query": "q"}'
    rotated = sealer(other, key)  # a new key first; the old one still opens what it sealed
    assert rotated.open(sealed) == '{"query": "q"}'
    assert sealer(other).open(rotated.seal("x")) == "x"  # the new key seals
    with pytest.raises(SettingsError, match="same keys"):
        sealer(other).open(sealed)


def test_a_misspelled_variable_is_one_warning_line_at_start(tmp_path):
    r = run_ragmon(["text-key"], clean_env(RAGMON_SAMPLE_RAT="0.1"), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip()
    assert one_line(r.stderr).endswith(
        "unknown variable ignored: RAGMON_SAMPLE_RAT (did you mean RAGMON_SAMPLE_RATE?)"
    )


def test_an_empty_judge_model_is_refused_in_one_line(tmp_path):
    r = run_ragmon(["text-key"], clean_env(RAGMON_JUDGE_MODEL=""), cwd=tmp_path)
    assert r.returncode == 2
    assert one_line(r.stderr) == (
        "ragmon: bad configuration: RAGMON_JUDGE_MODEL is empty: give it a value or unset it "
        "(default gpt-4o-mini)"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: s.name
)
def test_serve_leaves_no_process_behind_when_its_pid_alone_is_signalled(tmp_path, sig):
    """As a supervisor does: the signal to the main PID only, never to its process group."""
    redis = RedisServer().start()
    port = free_port()
    api = Ragmon(["serve", "--port", str(port)], ragmon_env(redis.url), cwd=tmp_path)
    try:
        api.wait_for(rf"ragmon serve .* on http://127\.0\.0\.1:{port}", timeout=scaled(60))
        # the first scrape starts the /metrics renderer (and multiprocessing's resource tracker)
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=scaled(60))
        assert r.status_code == 200
        main = psutil.Process(api.proc.pid)
        children = main.children(recursive=True)
        assert len(children) >= 2, [c.cmdline() for c in children]
        os.kill(main.pid, sig)
        api.proc.wait(scaled(30))

        def gone() -> bool:
            return not [c for c in children if c.is_running() and c.status() != "zombie"]

        wait_until(gone, 10, f"the children of ragmon serve after {sig.name}")
    finally:
        api.stop(signal.SIGKILL)
        redis.cleanup()
