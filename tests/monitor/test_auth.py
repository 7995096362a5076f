"""Access: API keys (hashes only, app-bound keys, a keys file), `/metrics` keys, `ragmon serve`.

Every refused request must leave Redis without an event key and the queue empty: a refused
writer must not be able to put anything into a dashboard.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from ragmon.api.auth import KeyRing, Principal
from ragmon.setting_values import SettingsError
from ragmon.settings import Settings
from tests.support.events import make_event, ref, result_url
from tests.support.stack import free_port
from tests.support.waiting import scaled

ANY_KEY = "any-app-key-0123456789abcdef"  # may write any app
SUPPORT_KEY = "support-only-key-0123456789"  # may write only app=support
METRICS_KEY = "metrics-scraper-key-0123456789"
KEYS = f"{ANY_KEY},{SUPPORT_KEY}:support"
ROOT = Path(__file__).resolve().parents[2]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def strings_inside(obj: object, seen: set[int] | None = None) -> list[str | bytes]:
    """Every str/bytes reachable from `obj` through attributes and containers."""
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, str | bytes):
        return [obj]
    out: list[str | bytes] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += strings_inside(k, seen) + strings_inside(v, seen)
    elif isinstance(obj, list | tuple | set | frozenset):
        for v in obj:
            out += strings_inside(v, seen)
    elif hasattr(obj, "__dict__"):
        out += strings_inside(vars(obj), seen)
    return out


def stored_anything(redis_url: str) -> list[bytes]:
    """Event keys and RQ job keys in Redis, plus a marker when the queue is not empty."""
    client = redis.Redis.from_url(redis_url)
    try:
        found = list(client.scan_iter("ragmon:ev:*")) + list(client.scan_iter("rq:job:*"))
        if client.llen("rq:queue:ragmon"):
            found.append(b"rq:queue:ragmon is not empty")
        return found
    finally:
        client.close()


def rejected(api, reason: str, expected: int, timeout: float = 3.0) -> int:
    """`events_rejected|reason` once the writer has flushed it (it batches rejections)."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        n = int(api.store.counters().get(f"events_rejected|{reason}", 0))
        if n >= expected or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


# ---- the key ring ---------------------------------------------------------------------------


def test_keyring_keeps_only_hashes():
    ring = KeyRing((ANY_KEY, f"{SUPPORT_KEY}:support"))
    inside = strings_inside(ring)
    assert inside, "the walk found nothing: it would prove nothing"
    for secret in (ANY_KEY, SUPPORT_KEY):
        assert not any(secret in s for s in inside if isinstance(s, str))
        assert not any(secret.encode() in s for s in inside if isinstance(s, bytes))
        assert secret.encode() not in pickle.dumps(ring)
        assert secret not in repr(ring)


def test_keyring_checks_bearer_keys_and_app_binding():
    ring = KeyRing((ANY_KEY, f"{SUPPORT_KEY}:support"))
    assert ring.enabled
    assert ring.check(f"Bearer {ANY_KEY}") == Principal(None)
    assert ring.check(f"bearer   {SUPPORT_KEY} ") == Principal("support")
    for header in [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Basic {ANY_KEY}",
        ANY_KEY,
        f"Bearer {ANY_KEY}x",
        f"Bearer {ANY_KEY[:-1]}",
        f"Bearer {SUPPORT_KEY}:support",
        f"Bearer {ANY_KEY.upper()}",
    ]:
        assert ring.check(header) is None, header


def test_empty_keyring_means_auth_off():
    ring = KeyRing(())
    assert not ring.enabled
    assert ring.check(f"Bearer {ANY_KEY}") is None


# ---- the API: refused requests store nothing -------------------------------------------------

REFUSED = [
    ("no header", {}, 401),
    ("wrong key", bearer("wrong-key-0123456789abcdef"), 401),
    ("key with a suffix", bearer(ANY_KEY + "x"), 401),
    ("basic scheme", {"Authorization": f"Basic {ANY_KEY}"}, 401),
    ("metrics key on /v1", bearer(METRICS_KEY), 401),
    ("other app's key", bearer(SUPPORT_KEY), 403),
]


@pytest.mark.parametrize(("what", "headers", "status"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_writes_store_nothing(make_api, redis_url, what, headers, status):
    api = make_api(RAGMON_API_KEYS=KEYS, RAGMON_METRICS_API_KEYS=METRICS_KEY)
    billing = make_event(labels={"app": "billing"}, seed=1)
    r1 = api.client.post("/v1/retrievals", json=billing, headers=headers)
    r2 = api.client.post(
        "/v1/retrievals/batch",
        json={"events": [make_event(labels={"app": "billing"}, seed=s) for s in range(2, 5)]},
        headers=headers,
    )
    for r in (r1, r2):
        assert r.status_code == status, r.text
        if status == 401:
            assert r.headers["www-authenticate"] == "Bearer"
        assert "detail" in r.json()
    assert stored_anything(redis_url) == []
    reason = "unauthorized" if status == 401 else "forbidden"
    assert rejected(api, reason, 2) == 2


def test_app_bound_key_refuses_a_mixed_batch_whole(make_api, redis_url):
    api = make_api(RAGMON_API_KEYS=KEYS)
    events = [make_event(labels={"app": "support"}, seed=s) for s in range(3)]
    events.append(make_event(labels={"app": "billing"}, seed=9))
    r = api.client.post(
        "/v1/retrievals/batch", json={"events": events}, headers=bearer(SUPPORT_KEY)
    )
    assert r.status_code == 403
    assert "events[3].labels.app" in r.json()["detail"]
    assert stored_anything(redis_url) == []


def test_app_bound_key_refuses_the_default_app(make_api, redis_url):
    api = make_api(RAGMON_API_KEYS=KEYS)
    event = make_event(seed=3)
    event["labels"] = {"retriever": "bm25"}  # app missing → "default", not "support"
    r = api.client.post("/v1/retrievals", json=event, headers=bearer(SUPPORT_KEY))
    assert r.status_code == 403
    assert stored_anything(redis_url) == []


def test_right_keys_are_accepted(make_api, redis_url):
    api = make_api(RAGMON_API_KEYS=KEYS)
    mine = make_event(labels={"app": "support"}, seed=1)
    theirs = make_event(labels={"app": "billing"}, seed=2)
    assert (
        api.client.post("/v1/retrievals", json=mine, headers=bearer(SUPPORT_KEY)).status_code == 202
    )
    assert (
        api.client.post("/v1/retrievals", json=theirs, headers=bearer(ANY_KEY)).status_code == 202
    )
    batch = {"events": [make_event(labels={"app": "support"}, seed=s) for s in range(3, 6)]}
    r = api.client.post("/v1/retrievals/batch", json=batch, headers=bearer(SUPPORT_KEY))
    assert r.status_code == 202
    assert len(list(redis.Redis.from_url(redis_url).scan_iter("ragmon:ev:*"))) == 5


def test_reading_results_needs_a_key_and_the_right_app(make_api):
    api = make_api(RAGMON_API_KEYS=KEYS)
    mine = make_event(labels={"app": "support"}, seed=1)
    theirs = make_event(labels={"app": "billing"}, seed=2)
    for ev in (mine, theirs):
        assert (
            api.client.post("/v1/retrievals", json=ev, headers=bearer(ANY_KEY)).status_code == 202
        )
    assert api.client.get(f"/v1/retrievals/{mine['event_id']}").status_code == 401
    wrong = bearer("wrong-key-0123456789abcdef")
    assert api.client.get(f"/v1/retrievals/{mine['event_id']}", headers=wrong).status_code == 401
    r = api.client.get(f"/v1/retrievals/{mine['event_id']}", headers=bearer(SUPPORT_KEY))
    assert r.status_code == 200 and r.json()["labels"]["app"] == "support"
    # another app's event answers like an unknown id: the key learns nothing about it
    r = api.client.get(f"/v1/retrievals/{theirs['event_id']}", headers=bearer(SUPPORT_KEY))
    unknown = api.client.get("/v1/retrievals/no-such-id", headers=bearer(SUPPORT_KEY))
    assert r.status_code == unknown.status_code == 404
    assert r.json() == unknown.json()
    # naming the other app does not help a bound key; an unbound key names the app it reads
    r = api.client.get(result_url(theirs), headers=bearer(SUPPORT_KEY))
    assert r.status_code == 403 and "app=support" in r.json()["detail"]
    assert api.client.get(result_url(theirs), headers=bearer(ANY_KEY)).status_code == 200
    r = api.client.get(f"/v1/retrievals/{theirs['event_id']}", headers=bearer(ANY_KEY))
    assert r.status_code == 404  # no `app`: the app `default`, which has no such event
    r = api.client.get(f"/v1/retrievals/{mine['event_id']}?app=a|b", headers=bearer(ANY_KEY))
    assert r.status_code == 422  # an app label never holds `|`: refs stay unambiguous


def test_failed_event_result_keeps_its_labels(make_api):
    api = make_api(RAGMON_API_KEYS=KEYS)
    theirs = make_event(labels={"app": "billing"}, seed=2)
    assert (
        api.client.post("/v1/retrievals", json=theirs, headers=bearer(ANY_KEY)).status_code == 202
    )
    assert api.store.fail(ref(theirs), "malformed", "the judge answered nonsense")
    r = api.client.get(result_url(theirs), headers=bearer(ANY_KEY))
    assert r.json()["status"] == "failed" and r.json()["labels"]["app"] == "billing"
    r = api.client.get(f"/v1/retrievals/{theirs['event_id']}", headers=bearer(SUPPORT_KEY))
    assert r.status_code == 404


# ---- ids scoped by app (issue: a key bound to appA could read, claim and probe appB's ids) ----

A_KEY, B_KEY = "app-a-key-0123456789abcdef", "app-b-key-0123456789abcdef"
AB_KEYS = f"{A_KEY}:appA,{B_KEY}:appB"


def test_an_id_claimed_by_one_app_does_not_touch_the_other(make_api):
    api = make_api(RAGMON_API_KEYS=AB_KEYS)
    theirs = make_event(labels={"app": "appB"}, seed=1)
    mine = {**make_event(labels={"app": "appA"}, seed=2), "event_id": theirs["event_id"]}
    # appA claims the id first: a new event of appA's, nothing about appB's answer
    r = api.client.post("/v1/retrievals", json=mine, headers=bearer(A_KEY))
    assert r.status_code == 202 and r.json()["status"] == "queued"
    api.store.fail(ref(mine), "malformed", "x")  # appA's event is now failed
    # appB's later event with that id is stored, queued and readable by appB
    r = api.client.post("/v1/retrievals", json=theirs, headers=bearer(B_KEY))
    assert r.status_code == 202 and r.json()["status"] == "queued"
    got = api.client.get(f"/v1/retrievals/{theirs['event_id']}", headers=bearer(B_KEY)).json()
    assert got["status"] == "queued" and got["labels"]["app"] == "appB"
    # appA posting the id again sees its own (failed) event, never appB's status
    r = api.client.post("/v1/retrievals", json=mine, headers=bearer(A_KEY))
    assert r.status_code == 200 and r.json()["status"] == "failed"
    assert api.store.counters()["events_received"] == 2
    assert api.store.statuses([ref(mine), ref(theirs)]) == ["failed", "queued"]


def test_another_apps_sampled_out_event_is_not_readable(make_api):
    api = make_api(RAGMON_API_KEYS=AB_KEYS, RAGMON_SAMPLE_RATE="0.5")
    events = [make_event(labels={"app": "appB"}, seed=i) for i in range(40)]
    r = api.client.post("/v1/retrievals/batch", json={"events": events}, headers=bearer(B_KEY))
    out = [x["event_id"] for x in r.json()["results"] if x["status"] == "sampled_out"]
    assert out
    for eid in out:
        assert api.client.get(f"/v1/retrievals/{eid}", headers=bearer(A_KEY)).status_code == 404
        assert api.client.get(f"/v1/retrievals/{eid}", headers=bearer(B_KEY)).status_code == 200


def commands_during(redis_url: str, action) -> list[str]:
    """Every command Redis runs while `action()` runs (Redis' own MONITOR stream)."""
    import threading

    seen: list[str] = []
    client = redis.Redis.from_url(redis_url)
    ready, stop = threading.Event(), threading.Event()

    def watch() -> None:
        with client.monitor() as m:
            ready.set()
            for cmd in m.listen():
                seen.append(cmd["command"])
                if stop.is_set() and "ragmon-monitor-end" in cmd["command"]:
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    ready.wait(5)
    time.sleep(0.1)
    action()
    stop.set()
    redis.Redis.from_url(redis_url).get("ragmon-monitor-end")
    t.join(5)
    client.close()
    return seen


@pytest.mark.process
def test_reading_another_apps_id_never_reads_its_event(make_api, redis_url):
    """A cross-app 404 took 20 ms on a large event and 1.1 ms on an unknown id: the other
    app's event was loaded, then hidden. Now only the caller's app is looked up."""
    api = make_api(RAGMON_API_KEYS=AB_KEYS)
    big = make_event(n=200, k=5, labels={"app": "appB"}, seed=1)
    for p in big["passages"]:
        p["text"] = "x" * 30_000
    assert api.client.post("/v1/retrievals", json=big, headers=bearer(B_KEY)).status_code == 202
    url = f"/v1/retrievals/{big['event_id']}"
    answers = []
    cmds = commands_during(
        redis_url, lambda: answers.append(api.client.get(url, headers=bearer(A_KEY)))
    )
    assert answers[0].status_code == 404
    touched = {w.strip("'\"") for c in cmds for w in c.split() if "ragmon:ev:" in w}
    assert touched == {f"ragmon:ev:appA|{big['event_id']}"}  # its own app's key, nothing else


# ---- /metrics ----------------------------------------------------------------------------------


@pytest.mark.process
def test_metrics_open_without_metrics_keys(make_api):
    api = make_api(RAGMON_API_KEYS=KEYS)
    r = api.client.get("/metrics")
    assert r.status_code == 200 and "ragmon_events_received_total" in r.text


@pytest.mark.process
def test_metrics_protected_separately(make_api):
    api = make_api(RAGMON_API_KEYS=KEYS, RAGMON_METRICS_API_KEYS=METRICS_KEY)
    for headers in ({}, bearer(ANY_KEY), bearer("wrong-key-0123456789abcdef")):
        r = api.client.get("/metrics", headers=headers)
        assert r.status_code == 401, headers
        assert "ragmon_" not in r.text
    r = api.client.get("/metrics", headers=bearer(METRICS_KEY))
    assert r.status_code == 200 and "ragmon_events_received_total" in r.text
    # health probes stay open (a kubelet sends no key)
    assert api.client.get("/healthz").status_code == 200
    assert api.client.get("/readyz").status_code == 200


def test_metrics_keys_alone_leave_ingest_open(make_api):
    api = make_api(RAGMON_METRICS_API_KEYS=METRICS_KEY)
    assert api.client.post("/v1/retrievals", json=make_event()).status_code == 202
    assert api.client.get("/metrics").status_code == 401


# ---- keys from a file ------------------------------------------------------------------------


def test_keys_file_joins_the_environment_keys(make_api, tmp_path, redis_url):
    path = tmp_path / "keys"
    path.write_text(f"# ragmon keys\n\n{SUPPORT_KEY}:support  # the support bot\n{ANY_KEY}\n")
    extra = "env-key-0123456789abcdefgh"
    s = Settings.from_env({"RAGMON_API_KEYS": extra, "RAGMON_API_KEYS_FILE": str(path)}, None)
    assert s.api_keys == (extra, f"{SUPPORT_KEY}:support", ANY_KEY)
    api = make_api(RAGMON_API_KEYS_FILE=str(path))
    support = make_event(labels={"app": "support"}, seed=1)
    billing = make_event(labels={"app": "billing"}, seed=2)
    assert api.client.post("/v1/retrievals", json=support).status_code == 401
    assert (
        api.client.post("/v1/retrievals", json=billing, headers=bearer(SUPPORT_KEY)).status_code
        == 403
    )
    assert (
        api.client.post("/v1/retrievals", json=support, headers=bearer(SUPPORT_KEY)).status_code
        == 202
    )
    assert (
        api.client.post("/v1/retrievals", json=billing, headers=bearer(ANY_KEY)).status_code == 202
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("", "holds no keys"),
        ("# only a comment\n\n", "holds no keys"),
        ("short-secret\n", "at least 16 characters"),
        ("long-enough-secret-123456:\n", "the app after ':'"),
        ("long-enough-secret-123456:bad app\n", "the app after ':'"),
    ],
)
def test_bad_keys_file_stops_start_up_without_echoing_keys(tmp_path, content, message):
    path = tmp_path / "keys"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError, match=message) as info:
        Settings.from_env({"RAGMON_API_KEYS_FILE": str(path)}, dotenv=None)
    assert str(info.value).startswith("RAGMON_API_KEYS_FILE:")
    if content:
        assert content.split(":")[0].strip() not in str(info.value)


def test_trailing_colon_is_not_an_unrestricted_key():
    with pytest.raises(SettingsError, match="the app after ':'") as info:
        Settings.from_env({"RAGMON_API_KEYS": f"{SUPPORT_KEY}:"}, dotenv=None)
    assert SUPPORT_KEY not in str(info.value)


# ---- `ragmon serve` and the bind address --------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGMON_")}
    env.pop("REDIS_URL", None)
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def serve(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ragmon.cli", "serve", *args],
        env=env,
        cwd=cwd,  # no .env file there
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "example.internal"])
@pytest.mark.process
def test_serve_refuses_public_host_without_keys(tmp_path, redis_url, host):
    port = free_port()
    proc = serve(["--host", host, "--port", str(port)], cli_env(REDIS_URL=redis_url), tmp_path)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert f"refusing to bind {host} without RAGMON_API_KEYS" in err
    assert "--allow-insecure-public" in err


@pytest.mark.process
def test_serve_defaults_to_loopback_and_warns_without_keys(tmp_path, redis_url):
    port = free_port()
    proc = serve(["--port", str(port)], cli_env(REDIS_URL=redis_url), tmp_path)
    try:
        deadline = time.monotonic() + scaled(20)
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "ragmon serve did not start"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert "no RAGMON_API_KEYS" in err
    assert f"http://127.0.0.1:{port}" in err


_PROBE = """
import subprocess, sys, time, httpx
proc = subprocess.Popen([sys.executable, "-m", "ragmon.cli", "serve", *sys.argv[2:]],
                        stderr=subprocess.PIPE, text=True)
ok = False
for _ in range(200):
    try:
        ok = httpx.get(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=1).status_code == 200
        if ok:
            break
    except httpx.TransportError:
        time.sleep(0.1)
proc.terminate()
err = proc.communicate(timeout=15)[1]
print("HEALTHZ", ok)
print(err)
"""


def _private_netns_works() -> bool:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    r = subprocess.run(
        ["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, timeout=10
    )
    return r.returncode == 0


@pytest.mark.parametrize("how", ["flag", "keys file"])
@pytest.mark.process
def test_serve_on_all_interfaces_with_flag_or_keys(tmp_path, how):
    """--host 0.0.0.0 starts with --allow-insecure-public, or with keys (here from
    RAGMON_API_KEYS_FILE); run in a private network namespace so that the test never listens
    on a real interface."""
    if not _private_netns_works():
        pytest.skip("needs `unshare -n` (root) to bind 0.0.0.0 without exposing a port")
    port = free_port()
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    args = ["--host", "0.0.0.0", "--port", str(port)]
    env = cli_env(REDIS_URL="redis://127.0.0.1:1/0")
    if how == "flag":
        args.append("--allow-insecure-public")
    else:
        (tmp_path / "keys").write_text(f"{ANY_KEY}\n")
        env["RAGMON_API_KEYS_FILE"] = str(tmp_path / "keys")
    r = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
         sys.executable, str(script), str(port), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert "HEALTHZ True" in r.stdout, r.stdout + r.stderr
    assert f"http://0.0.0.0:{port}" in r.stdout
    assert ("no RAGMON_API_KEYS" in r.stdout) == (how == "flag")
