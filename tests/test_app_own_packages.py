"""An app with packages of its own named `monitor` and `workers` (ragmon's folder names) imports
the SDK and both framework hooks, and records events: ragmon's import package is `ragmon`, so
the app's folder first on `sys.path` (as when it runs from its checkout) shadows nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.waiting import scaled

pytestmark = pytest.mark.slow

APP = """
import json, sys

import monitor.client, workers  # the app's own packages, first on sys.path
from ragmon.client import RetrievalMonitor
from ragmon.client.langchain import RagmonCallbackHandler
from ragmon.client.llamaindex import RagmonEventHandler
from llama_index.core.instrumentation import get_dispatcher
from tests.support import rag_app

assert monitor.client.OWN and workers.OWN, "the app's own monitor and workers"
rag = RetrievalMonitor(sys.argv[1], labels={"app": "own-packages"})
get_dispatcher().add_event_handler(RagmonEventHandler(monitor=rag, labels={"retriever": "li"}))
handler = RagmonCallbackHandler(rag, labels={"retriever": "lc"})
rag_app.langchain_retriever().invoke("how do I restore a folder", config={"callbacks": [handler]})
rag_app.llamaindex_retriever().retrieve("refund for an annual plan")
rag.record("sdk query", [("kb-1", "text")], k=1, labels={"retriever": "sdk"}, event_id="own-sdk")
rag.close(timeout=20)
print(json.dumps({"stats": rag.stats(), "monitor": monitor.__file__}))
"""


def test_an_app_with_its_own_monitor_and_workers_packages_records_events(tmp_path, api):
    for name in ("monitor", "workers"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("OWN = True\n")
    (tmp_path / "monitor" / "client.py").write_text("OWN = True\n")
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    repo = str(Path(__file__).resolve().parents[1])
    run = subprocess.run(
        [sys.executable, "app.py", api.url],
        cwd=tmp_path,  # sys.path[0] is the app's folder: its monitor/ and workers/ come first
        env={"PYTHONPATH": repo, "PATH": "/usr/bin:/bin"},  # tests.support for the retrievers
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["monitor"] == str(tmp_path / "monitor" / "__init__.py")
    assert out["stats"]["sent"] == out["stats"]["recorded"] == 3, out["stats"]
    store = api.store
    prefix = store.keys.event("")
    refs = [key.decode().removeprefix(prefix) for key in store.client.scan_iter(prefix + "*")]
    events = [ev for ev in store.load_events(refs) if ev and ev["labels"]["app"] == "own-packages"]
    assert sorted(ev["labels"]["retriever"] for ev in events) == ["lc", "li", "sdk"]
