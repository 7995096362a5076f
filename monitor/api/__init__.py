"""The sidecar HTTP API (FastAPI): `create_app(settings)`."""

from ragmon.api.app import create_app

__all__ = ["create_app"]
