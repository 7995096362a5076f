"""Clients loading one page back to back, closed loop, in a process of their own (for
`bench_tenants`: the clients of one app's explorer beside another app's sender).

    python -m tests.bench.page_clients URL CLIENTS SECONDS

Imports only what it uses, prints `ready`, waits for a line on stdin, then loads URL from
CLIENTS clients for SECONDS and prints the latencies (s) as one JSON list. So the loaded phase
measures the pages, not this process starting (importing ragmon took a CPU-second here, at
normal priority, at the start of every loaded phase).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx


async def load(url: str, clients: int, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds

    async def one() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                r = await client.get(url)
                r.raise_for_status()
                out.append(time.perf_counter() - t0)

    await asyncio.gather(*(one() for _ in range(clients)))
    return out


def main() -> int:
    url, clients, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(asyncio.run(load(url, clients, seconds))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
