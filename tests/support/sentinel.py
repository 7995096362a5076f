"""Redis behind real Sentinels for tests and benchmarks: a primary, a replica of it, and
`sentinels` Debian `redis-sentinel` processes watching them (a failover needs `quorum` of them
to agree the primary is down, and a majority to elect the one that runs it)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
import redis

from tests.support.stack import Child, RedisServer, free_port
from tests.support.waiting import wait_until

SERVICE = "ragmon-main"
DOWN_AFTER_MS = 1000  # a primary silent this long is down to a Sentinel


class SentinelFleet:
    """A primary, a replica of it and `sentinels` Sentinels watching them."""

    def __init__(self, sentinels: int = 1, quorum: int = 1) -> None:
        binary = shutil.which("redis-sentinel")
        if binary is None:
            pytest.skip("redis-sentinel missing: apt-get install -y redis-sentinel")
        self.primary = RedisServer().start()
        self.replica = RedisServer().start()
        r = redis.Redis(port=self.replica.port)
        r.replicaof("127.0.0.1", self.primary.port)
        wait_until(lambda: r.info("replication").get("master_link_status") == "up", 10,
                   "the replica to sync")  # fmt: skip
        r.close()
        self.dir = Path(tempfile.mkdtemp(prefix="ragmon-sentinel-"))
        self.ports = [free_port() for _ in range(sentinels)]
        self.sentinels = []
        for port in self.ports:
            conf = self.dir / f"sentinel-{port}.conf"  # each its own: a Sentinel rewrites it
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                f"logfile {self.dir / f'sentinel-{port}.log'}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} {quorum}\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
            )
            self.sentinels.append(Child([binary, str(conf)], cwd=None))
        self.client = redis.Redis(port=self.ports[0], decode_responses=True)
        wait_until(self._sees_everyone, 20, "the Sentinels to find the replica and each other")

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def _sees_everyone(self) -> bool:
        try:
            known = self.client.sentinel_sentinels(SERVICE)
            return bool(self.client.sentinel_slaves(SERVICE)) and len(known) == len(self.ports) - 1
        except redis.ConnectionError:
            return False

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel names it."""
        host, port = self.client.sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def _all_name(self, port: int) -> bool:
        for p in self.ports:
            with redis.Redis(port=p, decode_responses=True) as s:
                if int(s.sentinel_get_master_addr_by_name(SERVICE)[1]) != port:
                    return False
        return True

    def failover(self) -> None:
        """A failover the Sentinel runs (as on a primary's loss), waited for until the replica
        is the primary."""
        self.client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        self.wait_promoted()
        self.wait_settled()

    def _settled(self, port: int) -> bool:
        """Every Sentinel names `port` as the primary and sees it up, with no failover running."""
        for p in self.ports:
            with redis.Redis(port=p, decode_responses=True) as s:
                m = s.sentinel_master(SERVICE)
                down = {"s_down", "o_down", "failover_in_progress"} & set(m["flags"].split(","))
                if int(m["port"]) != port or down:
                    return False
        return True

    def _settled_twice(self, port: int) -> bool:
        """`_settled` now and again a down-after period later: a Sentinel that last heard the
        new primary before its promotion (a replica stopped for a moment) can mark it down
        just after it, and would fail over to the old primary if that were back already."""
        if not self._settled(port):
            return False
        time.sleep(1.5 * DOWN_AFTER_MS / 1000)
        return self._settled(port)

    def wait_promoted(self, seconds: float = 30) -> None:
        """Until every Sentinel names the replica as the primary (one still naming the old
        primary would take it back as the primary when it restarts empty)."""
        wait_until(lambda: self._all_name(self.replica.port), seconds, "the failover", every=0.1)

    def wait_settled(self, seconds: float = 30) -> None:
        """Until every Sentinel keeps seeing the promoted replica up: the old primary may come
        back then without being taken for the primary again."""
        wait_until(lambda: self._settled_twice(self.replica.port), seconds,
                   "the new primary up for every Sentinel", every=0.1)  # fmt: skip

    def logs(self, lines: int = 40) -> str:
        """The last `lines` of each Sentinel's log, for a failure's message."""
        return "\n".join(
            f"--- sentinel {port}\n" + "\n".join(log.read_text().splitlines()[-lines:])
            for port in self.ports
            if (log := self.dir / f"sentinel-{port}.log").exists()
        )

    def stop(self) -> None:
        self.client.close()
        for s in self.sentinels:
            s.stop()
        self.primary.cleanup()
        self.replica.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)
