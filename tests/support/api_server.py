"""The real API in a uvicorn server thread on a free port (in-process, real HTTP)."""

from __future__ import annotations

import threading
import time

import httpx

from ragmon.api import create_app
from ragmon.api.guard import GuardedServer, uvicorn_config
from ragmon.core.clock import Clock
from ragmon.settings import Settings
from tests.support.stack import free_port
from tests.support.waiting import scaled


class ApiServer:
    def __init__(self, settings: Settings, clock: Clock = time.time) -> None:
        self.settings = settings
        self.port = free_port()
        self.app = create_app(settings, clock=clock)
        self.server = GuardedServer(
            uvicorn_config(
                self.app, settings, host="127.0.0.1", port=self.port, log_level="warning"
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self):  # noqa: ANN201 - the app's ragmon.store.Store
        return self.app.state.store

    def start(self) -> ApiServer:
        self.thread.start()
        deadline = time.monotonic() + scaled(10)  # stretched by the load
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("API did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.client.close()
        self.store.client.close()
