"""Run the API as `ragmon serve` does: refuse an open bind without keys, bind the socket here
(so a busy port is one clear line), fit the connection limit to the open-files limit, run
uvicorn while a thread watches Redis."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import sys
from dataclasses import replace

from ragmon.settings import Settings

log = logging.getLogger("ragmon")

BACKLOG = 2048  # the kernel's queue while the app starts (`guard.LISTEN_BACKLOG` after)
# open files kept for Redis connections, logs, the listening socket (100), and for the
# connections accepted past the cap before they are closed (3 turns of the loop)
FD_RESERVE = 300
# How long a thread holding the GIL keeps it while another waits (Python's default: 5 ms). The
# event loop waits for it after every poll; threads (sync store calls, the decoding pool's
# result thread unpickling a large body's items) must not add that to every request.
SWITCH_INTERVAL_S = 0.0005


class ServeError(Exception):
    """The API cannot start for a reason the user can fix (the message says how)."""


def check_exposure(settings: Settings, host: str, insecure: bool) -> None:
    """Refuse a non-loopback bind without API keys unless `insecure`; warn on any keyless one."""
    if settings.api_keys:
        return
    if not _is_loopback(host) and not insecure:
        raise ServeError(
            f"refusing to bind {host} without RAGMON_API_KEYS: anyone who can reach it could "
            "write events. Set RAGMON_API_KEYS, or pass --allow-insecure-public if a proxy in "
            "front authenticates."
        )
    log.warning("no RAGMON_API_KEYS: the API accepts events from anyone who can reach it")


def run_api(settings: Settings, sock: socket.socket, host: str, port: int, log_level: str) -> None:
    """Serve on the bound `sock` until uvicorn exits; the socket is closed on the way out."""
    from ragmon.api import create_app
    from ragmon.api.child import release_large_frees
    from ragmon.api.guard import GuardedServer, uvicorn_config
    from ragmon.preflight import RedisWatch, warn_memory

    release_large_frees()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(settings)
    warn_memory(app.state.store)  # an evicting policy, or maxmemory below the forecast
    watch = RedisWatch(app.state.store).start()
    settings = _fit_connections(settings)
    config = uvicorn_config(app, settings, host=host, port=port, log_level=log_level)
    try:
        GuardedServer(config).run(sockets=[sock])
    finally:
        watch.stop()
        sock.close()


def _fit_connections(settings: Settings) -> Settings:
    """Raise the open-files limit to its hard limit and keep RAGMON_MAX_CONNECTIONS below it
    (Redis connections, logs and the listening socket need some): past the limit every accept
    fails and logs "Too many open files"."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    room = soft - FD_RESERVE
    if settings.max_connections > room:
        log.warning(
            "RAGMON_MAX_CONNECTIONS=%d is above what %d open files allow: using %d",
            settings.max_connections, soft, room,
        )  # fmt: skip
        return replace(settings, max_connections=max(10, room))
    return settings


def bind(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before the app starts."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ServeError(f"cannot resolve --host {host!r} ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(BACKLOG)  # connections wait in the backlog while the app starts
    except OSError as exc:
        sock.close()
        raise ServeError(_bind_problem(exc, host, port)) from None
    return sock


def _bind_problem(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another ragmon serve, or another "
            "program): stop it or choose another --port"
        )
    if exc.errno == errno.EACCES:
        return (
            f"not allowed to listen on port {port} (ports below 1024 need privileges): choose "
            "another --port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine (--host)"
    return f"cannot listen on {host}:{port} ({exc.strerror})"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
