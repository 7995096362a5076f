"""Where Redis is, and the one place its clients are made.

`REDIS_URL` is a plain URL (`redis://`, `rediss://`, `unix://`) or names Sentinels and the
service they watch: `redis+sentinel://[:password@]host:port[,host:port...]/service[/db]`
(`rediss+sentinel://` for TLS to the primary). A Sentinel client asks the Sentinels for the
primary at each new connection and drops a connection that finds a replica where the primary
was, so the API, the workers, RQ (on the workers' connection) and the report follow a failover
without a restart; a command caught in the failover fails like any Redis error (the API answers
`503` with `Retry-After`, the SDK retries).
"""

from __future__ import annotations

from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from ragmon.core.redis_address import is_sentinel, parse_sentinel


def _options(url: str, options: dict[str, Any]) -> dict[str, Any]:
    if not url.startswith("unix:"):
        options.setdefault("socket_keepalive", True)
    return options


def _primary(url: str, options: dict[str, Any], sentinel_class: Any, redis_class: Any) -> Any:
    """A client of the primary the Sentinels of `url` name, of `redis_class`."""
    a = parse_sentinel(url)
    timeout = options.get("socket_connect_timeout")
    sentinel = sentinel_class(
        list(a.sentinels), socket_timeout=timeout, socket_connect_timeout=timeout
    )
    return sentinel.master_for(
        a.service, redis_class=redis_class, db=a.db, password=a.password, ssl=a.ssl, **options
    )


def sync_client(url: str, **options: Any) -> redis.Redis:
    """A client of the primary at `url` (a plain or a Sentinel URL)."""
    options = _options(url, options)
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **options)
    return cast(redis.Redis, _primary(url, options, redis.sentinel.Sentinel, redis.Redis))


def async_client(url: str, **options: Any) -> redis.asyncio.Redis:
    """`sync_client` for asyncio."""
    options = _options(url, options)
    if not is_sentinel(url):
        return redis.asyncio.Redis.from_url(url, **options)
    primary = _primary(url, options, redis.asyncio.sentinel.Sentinel, redis.asyncio.Redis)
    return cast(redis.asyncio.Redis, primary)
