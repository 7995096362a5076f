"""A Redis address that names Sentinels (pure parsing: `ragmon.store.address` makes the
clients): `redis+sentinel://[:password@]host:port[,host:port...]/service[/db]`."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelAddress:
    """Sentinels, the service they watch, and how to reach its primary."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    password: str | None = None
    ssl: bool = False


def is_sentinel(url: str) -> bool:
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


def parse_sentinel(url: str) -> SentinelAddress:
    """The parts of a `redis+sentinel://` URL; ValueError naming what is wrong."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL ({' or '.join(SENTINEL_SCHEMES)}://)")
    hosts, _, path = rest.partition("/")
    password = None
    if "@" in hosts:
        auth, _, hosts = hosts.rpartition("@")
        password = unquote(auth.partition(":")[2] or auth) or None
    sentinels = []
    for part in (p.strip() for p in hosts.split(",")):
        if part.startswith("[") and part.endswith("]"):  # an IPv6 address, the default port
            host, port = part, str(SENTINEL_PORT)
        else:
            host, colon, port = part.rpartition(":")
            if not colon:
                host, port = part, str(SENTINEL_PORT)
        if not host or not port.isdigit():
            raise ValueError(f"a Sentinel must be host:port, got {part.strip()!r}")
        sentinels.append((host.strip("[]"), int(port)))
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise ValueError("name the service the Sentinels watch: redis+sentinel://host:port/name")
    if db and not db.isdigit():
        raise ValueError(f"the database after the service must be a number, got {db!r}")
    return SentinelAddress(
        tuple(sentinels), service, int(db or 0), password, scheme.lower().startswith("rediss")
    )
