"""The app side's install: `pip install .` (no extra) into a fresh venv is ragmon and orjson
(the SDK's fast encoder), with no server package (nor any other), and sends events to a running
ragmon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

APP = """
import json, sys
from ragmon.client import RetrievalMonitor

monitor = RetrievalMonitor(sys.argv[1], labels={"app": "light-app"})
monitor.record(
    "how do I reset my password",
    [("kb-1", "Open Settings > Security.", 0.9), ("kb-2", "Passwords expire.", 0.4)],
    k=2,
    event_id="light-1",
)
monitor.close(timeout=20)
try:
    import ragmon.client.langchain  # noqa: F401
    hook = "imported"
except ImportError as exc:
    hook = str(exc)
from ragmon.client import events
print(json.dumps({"stats": monitor.stats(), "hook": hook, "orjson": events.orjson is not None,
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""

pytestmark = pytest.mark.slow


def test_client_only_install_imports_and_sends_without_the_server(tmp_path, api):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "--disable-pip-version-check"]
    install = subprocess.run(
        [*pip, "install", "-q", str(ROOT)], capture_output=True, text=True, timeout=600
    )
    if install.returncode != 0 and "Could not find a version" in install.stderr:
        pytest.skip(f"no package index reachable: {install.stderr[-300:]}")
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run(
        [*pip, "list", "--format=json"], capture_output=True, text=True, check=True
    )
    installed = {d["name"].lower().replace("_", "-") for d in json.loads(listed.stdout)}
    assert installed - {"pip", "setuptools", "wheel"} == {"ragmon", "orjson"}, installed

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-c", APP, api.url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not the checkout: the installed package only
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["stats"]["sent"] == 1 and out["stats"]["recorded"] == 1, out["stats"]
    assert out["orjson"], "the install the README gives encodes with orjson"
    assert "pip install 'ragmon[langchain]'" in out["hook"]
    assert not set(out["modules"]) & {"pydantic", "fastapi", "redis", "google"}
    got = api.client.get("/v1/retrievals/light-1", params={"app": "light-app"}).json()
    assert got["status"] == "queued" and got["k"] == 2

    serve = subprocess.run(
        [str(venv / "bin" / "ragmon"), "serve"], capture_output=True, text=True, timeout=60,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert serve.returncode == 2
    assert "this install has only the SDK: pip install 'ragmon[server]'" in serve.stderr
