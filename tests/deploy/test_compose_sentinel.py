"""deploy/docker-compose.sentinel.yml: Redis as a primary, two replicas and three Sentinels under
the stack of deploy/docker-compose.yml. Checked as Compose merges the two files, and the
Sentinels' own configuration run by a real `redis-sentinel` against a real primary."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis

from ragmon.core.redis_address import parse_sentinel
from ragmon.settings import Settings
from ragmon.store.address import sync_client
from tests.deploy.conftest import COMPOSE_FILE, DEPLOY, load_yaml
from tests.deploy.test_compose import _compose_cli, service_env
from tests.support.stack import Child, RedisServer, free_port
from tests.support.waiting import wait_until

OVERLAY = DEPLOY / "docker-compose.sentinel.yml"


def merged() -> dict[str, dict[str, Any]]:
    """The services as `docker compose -f base -f overlay` merges them: mappings key by key,
    the overlay's scalars and lists (a command) replacing the base's."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return {k: merge(base[k], v) if k in base else v for k, v in over.items()} | {
                k: v for k, v in base.items() if k not in over
            }
        return over

    return merge(load_yaml(COMPOSE_FILE), load_yaml(OVERLAY))["services"]


def sentinel_conf(svc: dict[str, Any]) -> str:
    """The configuration a Sentinel service writes before it starts."""
    script = svc["command"][0]
    return re.search(r"<<'CONF'\n(.*?)\nCONF", script, re.S).group(1)  # type: ignore[union-attr]


def test_every_ragmon_service_asks_the_three_sentinels_for_the_watched_primary() -> None:
    services = merged()
    sentinels = [n for n, s in services.items() if "redis-sentinel" in str(s.get("command"))]
    assert sorted(sentinels) == ["sentinel-1", "sentinel-2", "sentinel-3"]
    monitor = re.search(r"^sentinel monitor (\S+) (\S+) (\d+) (\d+)$",
                        sentinel_conf(services["sentinel-1"]), re.M)  # fmt: skip
    assert monitor, sentinel_conf(services["sentinel-1"])
    name, host, port, quorum = monitor.groups()
    assert host in services and port == "6379" and int(quorum) == 2  # a majority of three
    replicas = [
        n for n, s in services.items() if f"--replicaof {host} 6379" in str(s.get("command"))
    ]
    assert len(replicas) == 2  # WAIT has one left to wait for after a failover
    for svc in ("api", "worker", "scheduler"):
        env = service_env(services[svc])
        address = parse_sentinel(env["REDIS_URL"])
        assert address.service == name
        assert sorted(h for h, _ in address.sentinels) == sorted(sentinels)
        assert all(p == 26379 for _, p in address.sentinels)
        settings = Settings.from_env(env, dotenv=None)  # every value parses
        assert settings.wait_replicas == 1
        assert set(services[svc]["depends_on"]) >= {"redis", *sentinels}


@pytest.mark.process
def test_the_sentinels_configuration_runs_and_names_the_primary_ragmon_reaches() -> None:
    """A real `redis-sentinel` with the file's configuration (the primary's name for this
    machine's address): ragmon's own client finds the primary through it."""
    binary = shutil.which("redis-sentinel")
    if binary is None:
        pytest.skip("redis-sentinel missing: apt-get install -y redis-sentinel")
    primary = RedisServer().start()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-compose-sentinel-"))
    port = free_port()
    conf = sentinel_conf(merged()["sentinel-1"]).replace("port 26379", f"port {port}")
    conf = conf.replace(" redis 6379 ", f" 127.0.0.1 {primary.port} ")
    (workdir / "sentinel.conf").write_text(f"{conf}\nbind 127.0.0.1\ndir {workdir}\n")
    sentinel = Child([binary, str(workdir / "sentinel.conf")], cwd=None)
    try:
        url = f"redis+sentinel://127.0.0.1:{port}/ragmon"
        client = sync_client(url)
        wait_until(lambda: _answers(client), 20, "the primary through the Sentinel")
        client.set("ragmon:compose-check", "1")
        assert redis.Redis(port=primary.port).get("ragmon:compose-check") == b"1"
    finally:
        sentinel.terminate()
        sentinel.wait(10)
        primary.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.mark.process
def test_docker_compose_config_accepts_both_files() -> None:
    cmd = _compose_cli()
    if cmd is None:
        pytest.skip("no Docker Compose v2 (`docker compose version` fails here)")
    out = subprocess.run(
        [*cmd, "-f", str(COMPOSE_FILE), "-f", str(OVERLAY), "config", "--quiet"],
        capture_output=True, text=True, cwd=DEPLOY,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
