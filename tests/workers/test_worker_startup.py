"""`ragmon worker` against a misconfigured stack: real processes, real ports, one line per fault."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ragmon.settings import Settings
from tests.support.api_server import ApiServer
from tests.support.cli import Ragmon
from tests.support.events import make_event
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.stack import REPO, RedisServer, clean_env, free_port, ragmon_env
from tests.support.waiting import scaled

pytestmark = pytest.mark.slow


def start_line(worker: Ragmon) -> str:
    (line,) = worker.wait_for(r"ragmon worker starting: ")
    return line


def test_worker_with_redis_down_says_so_at_once_then_works_when_it_comes_up(tmp_path):
    redis = RedisServer()  # port chosen, not started
    worker = Ragmon(
        ["worker", "--name", "w-down"],
        clean_env(REDIS_URL=redis.url, RAGMON_JUDGE="lexical"),
        cwd=tmp_path,
    )
    try:
        assert f"redis={redis.url} " in start_line(worker)
        (first,) = worker.wait_for(r"cannot reach Redis", timeout=10)
        assert f"cannot reach Redis at {redis.url} (" in first
        assert "Connection refused" in first and "check REDIS_URL" in first
        assert first.endswith("retrying every 5 s (attempt 1)")
        worker.wait_for(r"cannot reach Redis .*\(attempt 2\)", timeout=15)
        redis.start()
        worker.wait_for(r"Redis reachable after \d+ attempts", timeout=15)
        settings = Settings.from_env(
            {"REDIS_URL": redis.url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "fixed"}, None
        )
        api = ApiServer(settings).start()
        try:
            event = make_event()
            assert api.client.post("/v1/retrievals", json=event).status_code == 202
            done = _wait_status(api, event["event_id"])
            assert done == "done"
        finally:
            api.stop()
        assert "Traceback" not in worker.text()
    finally:
        worker.stop()
        redis.cleanup()


def _wait_status(api: ApiServer, event_id: str, timeout: float = 30) -> str:
    import time

    deadline = time.monotonic() + scaled(timeout)
    while True:
        r = api.client.get(f"/v1/retrievals/{event_id}", params={"app": "test"})  # make_event's
        status = r.json()["status"]
        if status != "queued" or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def _poll_metric(api: ApiServer, name: str, want: float = 1.0, timeout: float = 30) -> float:
    import time

    from tests.support.stack import sample_value

    deadline = time.monotonic() + scaled(timeout)
    while True:
        value = sample_value(api.client.get("/metrics").text, name)
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_a_second_worker_with_the_same_name_is_refused_in_one_line(redis_url, tmp_path):
    env = clean_env(REDIS_URL=redis_url, RAGMON_JUDGE="lexical")
    first = Ragmon(["worker", "--name", "dup"], env, cwd=tmp_path)
    try:
        first.wait_for(r"Listening on ragmon")
        second = Ragmon(["worker", "--name", "dup"], env, cwd=tmp_path)
        assert second.wait(60) == 2
        refusal = [line for line in second.lines if line.startswith("ragmon worker:")]
        assert len(refusal) == 1, second.text()
        assert refusal[0].startswith(
            f"ragmon worker: --name 'dup' is taken by a running worker (pid {first.proc.pid} on "
        )
        assert "choose another --name" in refusal[0]
        assert "Traceback" not in second.text() and "ValueError" not in second.text()
        assert first.proc.poll() is None, "the first worker keeps running"
    finally:
        first.stop()


class _NotFound(BaseHTTPRequestHandler):
    """Any HTTP server that is not an OpenAI-compatible one (a wrong OPENAI_BASE_URL)."""

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(404)
        self.send_header("Content-Length", "9")
        self.end_headers()
        self.wfile.write(b"not found")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_openai():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def strict_llm():
    """The fake OpenAI server, which knows one key and one model."""
    with FakeLLM(api_key="sk-right", models=frozenset({"judge-1"})) as fake:
        yield fake


@pytest.fixture
def silent():
    """A port that takes connections and never answers (a hung server, a black hole)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize(
    "fault",
    ["connection refused", "no answer", "wrong path", "bad key", "unknown model"],
)
def test_a_bad_judge_endpoint_is_named_in_one_line_at_start(
    fault, redis_url, tmp_path, strict_llm, not_openai, silent
):
    env = {"OPENAI_BASE_URL": strict_llm.url, "OPENAI_API_KEY": "sk-right"}
    env["RAGMON_JUDGE_MODEL"] = "judge-1"
    if fault == "no answer":
        env["OPENAI_BASE_URL"] = silent
        env["RAGMON_JUDGE_TIMEOUT"] = "1"
        expect = ("did not answer within 1 s", "check OPENAI_BASE_URL")
    elif fault == "connection refused":
        env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{free_port()}/v1"
        expect = ("is unreachable (connection refused)", "check OPENAI_BASE_URL")
    elif fault == "wrong path":
        env["OPENAI_BASE_URL"] = not_openai
        expect = ("answered 404 at ", "check OPENAI_BASE_URL")
    elif fault == "bad key":
        env["OPENAI_API_KEY"] = "sk-wrong"
        expect = ("answered 401 (Incorrect API key", "check OPENAI_API_KEY")
    else:
        env["RAGMON_JUDGE_MODEL"] = "judge-2"
        expect = ("answered 404 for model 'judge-2'", "check RAGMON_JUDGE_MODEL")
    worker = Ragmon(["worker"], clean_env(REDIS_URL=redis_url, **env), cwd=tmp_path)
    try:
        line = start_line(worker)
        assert "judge=openai model=" in line and "endpoint=127.0.0.1" in line
        (problem,) = worker.wait_for(r"WARNING ragmon\.worker: judge endpoint ")
        assert f"judge endpoint {env['OPENAI_BASE_URL']} " in problem
        for part in expect:
            assert part in problem, problem
        assert "sk-wrong" not in worker.text() and "sk-right" not in worker.text()
        # the worker does not refuse to start: the endpoint may come up later
        worker.wait_for(r"Listening on ragmon")
        assert worker.proc.poll() is None
    finally:
        worker.stop()
    assert "Traceback" not in worker.text(), worker.text()[-4000:]


def test_a_good_judge_endpoint_is_confirmed(redis_url, tmp_path, strict_llm):
    env = clean_env(
        REDIS_URL=redis_url,
        OPENAI_BASE_URL=strict_llm.url,
        OPENAI_API_KEY="sk-right",
        RAGMON_JUDGE_MODEL="judge-1",
        RAGMON_SAMPLE_RATE="0.5",
        RAGMON_DAILY_BUDGET_USD="3",
    )
    worker = Ragmon(["worker"], env, cwd=tmp_path)
    try:
        line = start_line(worker)
        assert "sampling=fixed 0.5 budget=3 USD/day" in line
        worker.wait_for(rf"INFO ragmon\.worker: judge endpoint {strict_llm.url} answers")
    finally:
        worker.stop()


def test_a_judge_failing_for_now_is_one_warning_naming_the_endpoint(redis_url, tmp_path):
    with FakeLLM() as fake:
        settings = Settings.from_env(
            {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "fixed"}, None
        )
        api = ApiServer(settings).start()
        env = clean_env(
            REDIS_URL=redis_url,
            OPENAI_BASE_URL=fake.url,
            OPENAI_API_KEY="k",
            RAGMON_JUDGE_MAX_RETRIES="0",
        )
        # the probe passes; then every grading call answers 503
        worker = Ragmon(["worker", "--name", "w-503"], env, cwd=tmp_path)
        try:
            worker.wait_for(r"Listening on ragmon")
            fake.script(*[Reply.error(503)] * 50)
            event = make_event(n=2, k=1)
            assert api.client.post("/v1/retrievals", json=event).status_code == 202
            (line,) = worker.wait_for(r"WARNING ragmon\.worker: judge failing ")
            assert "503" in line and f"judge endpoint {fake.url}" in line
            assert line.endswith("events go back to pending for a retry")
            assert "Traceback" not in worker.text()
            # the operations dashboard's "Events waiting to retry" panel reads this gauge
            assert _poll_metric(api, "ragmon_jobs_waiting_retry") == 1.0
        finally:
            worker.stop()
            api.stop()


def test_events_failed_by_a_bad_key_are_one_warning(redis_url, tmp_path, strict_llm):
    settings = Settings.from_env(
        {"REDIS_URL": redis_url, "RAGMON_JUDGE": "lexical", "RAGMON_SAMPLING": "fixed"}, None
    )
    api = ApiServer(settings).start()
    env = clean_env(
        REDIS_URL=redis_url,
        OPENAI_BASE_URL=strict_llm.url,
        OPENAI_API_KEY="sk-wrong",
        RAGMON_JUDGE_MODEL="judge-1",
    )
    worker = Ragmon(["worker"], env, cwd=tmp_path)
    try:
        worker.wait_for(r"Listening on ragmon")
        event = make_event(n=2, k=1)
        assert api.client.post("/v1/retrievals", json=event).status_code == 202
        (line,) = worker.wait_for(r"events failed for good")
        assert "1 events failed for good (client_error: HTTP 401" in line
        assert line.endswith("`ragmon requeue-failed` once it is fixed")
        assert _wait_status(api, event["event_id"]) == "failed"
    finally:
        worker.stop()
        api.stop()
    assert "Traceback" not in worker.text()


def test_the_worker_freezes_what_it_built_before_it_forks_work_horses(redis_url):
    """`start_worker` ends with `gc.freeze()`: a horse's collections leave the parent's pages
    alone (docs/performance.md, "CPU per judged passage")."""
    code = (
        "import gc; from ragmon.settings import Settings; from ragmon.workers.worker import "
        "start_worker; start_worker(Settings.from_env(dotenv=None)); print(gc.get_freeze_count())"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=ragmon_env(redis_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) > 10_000  # the imported modules' objects, at least
