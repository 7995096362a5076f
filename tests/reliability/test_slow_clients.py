"""2,000 slow connections held open against a real `ragmon serve` on loopback: each sends a
request line and then one header byte a second, reconnecting whenever the server closes it.
Meanwhile `/healthz` is asked every 100 ms on a fresh connection. The test asserts that every
health check is answered 200, that the API's memory and log stay bounded, and prints the
health-check latencies (no wall-clock assert: the figures go into docs/reliability.md).
SLOW_MAX_CONNECTIONS=1000 measures the eviction path (the cap below the number of clients)."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from tests.support.stack import ragmon_env, start_api

pytestmark = pytest.mark.slow

SLOW = 2000
DURATION_S = 15.0
HEADER_TIMEOUT_S = "3"


async def _hold(port: int, stop: asyncio.Event, stats: dict[str, int]) -> None:
    """One slow client: a request line, then a byte a second; reconnects when closed."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        try:
            writer.write(b"POST /v1/retrievals HTTP/1.1\r\nhost: localhost\r\nx-slow: ")
            while not stop.is_set():
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                except TimeoutError:
                    writer.write(b"a")
                    continue
                if data.startswith(b"HTTP/1.1 408"):
                    stats["408"] += 1
                break  # closed (or answered): open another
        except OSError:
            pass
        finally:
            writer.close()
        stats["closed"] += 1


def _slow_clients(port: int, seconds: float) -> dict[str, int]:
    stats = {"opened": 0, "closed": 0, "refused": 0, "408": 0}

    async def main() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(_hold(port, stop, stats)) for _ in range(SLOW)]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    return stats


@pytest.mark.slow  # real processes for 12-17 s: out of scripts/test --quick
def test_health_stays_responsive_under_2000_slow_connections(redis_url: str) -> None:
    log_path = Path(tempfile.mkdtemp(prefix="ragmon-slow-")) / "api.log"
    env = ragmon_env(
        redis_url,
        RAGMON_HEADER_TIMEOUT_S=HEADER_TIMEOUT_S,
        RAGMON_MAX_CONNECTIONS=os.environ.get("SLOW_MAX_CONNECTIONS", "4096"),
    )
    with log_path.open("w") as log:  # the API's own log level: what it writes is checked
        proc, url = start_api(env, args=(), ready="/healthz", stdout=log, stderr=log)
    port = int(url.rsplit(":", 1)[1])
    try:
        server = psutil.Process(proc.pid)
        rss0, log0 = server.memory_info().rss, log_path.stat().st_size
        # the slow clients in a process of their own: in this one they would hold the GIL
        # while the health checks are timed
        stop_at = time.monotonic() + DURATION_S
        me = "tests.reliability.test_slow_clients"
        attack = subprocess.Popen(
            [sys.executable, "-m", me, str(port), str(DURATION_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # let the connections open
        latencies, statuses, rss_max = [], [], rss0
        while time.monotonic() < stop_at - 0.5:
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                statuses.append(conn.getresponse().status)
                conn.close()
            except OSError as exc:
                statuses.append(type(exc).__name__)
            latencies.append((time.perf_counter() - t0) * 1000)
            rss_max = max(rss_max, server.memory_info().rss)
            time.sleep(0.1)
        stats = json.loads(attack.communicate(timeout=60)[0])
        grew = log_path.stat().st_size - log0
        q = statistics.quantiles(latencies, n=100)
        print(
            f"\n{SLOW} slow connections for {DURATION_S:g} s (header timeout {HEADER_TIMEOUT_S}"
            f" s): {stats}; /healthz x{len(latencies)}: p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms,"
            f" max {max(latencies):.1f} ms; API RSS {rss0 / 2**20:.1f} -> max"
            f" {rss_max / 2**20:.1f} MiB; log +{grew} bytes"
        )
        assert set(statuses) == {200}, statuses
        assert stats["opened"] >= SLOW  # the load was really there
        assert stats["408"] > 0  # and the header deadline closed some of them
        assert grew < 1_000_000, log_path.read_text()[-2000:]
        assert rss_max - rss0 < 200 * 2**20
    finally:
        proc.stop()


if __name__ == "__main__":  # the slow clients: PORT SECONDS; prints their counts as JSON
    print(json.dumps(_slow_clients(int(sys.argv[1]), float(sys.argv[2]))))
