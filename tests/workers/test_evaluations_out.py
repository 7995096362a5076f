"""Evaluations out (RAGMON_OTLP_EXPORT_ENDPOINT): judged events' measures leave through the real
OpenTelemetry OTLP/HTTP log exporter as `gen_ai.evaluation.result` events, to a receiver here
that decodes them with opentelemetry-proto; a receiver that hangs never holds up judging."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from ragmon.store import Store
from ragmon.workers import evaluations, jobs
from ragmon.workers.context import build_context, set_context
from tests.support.events import make_event, result_url
from tests.support.spans import export, retriever_attrs, span
from tests.support.stack import sample_value
from tests.workers.test_jobs import post


class Receiver:
    """An OTLP/HTTP logs endpoint: keeps each request's log records; while `held`, a request
    waits (the connection open, no answer) until `release`, then gets a 400."""

    def __init__(self, hold: bool = False) -> None:
        self.records: list[tuple[dict, object]] = []  # (attributes, the LogRecord)
        self.waiting = 0
        self.keys: list[str | None] = []
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.keys.append(self.headers.get("authorization"))
                if not receiver.gate.is_set():
                    receiver.waiting += 1
                    receiver.gate.wait(60)
                    self.send_response(400)
                    self.end_headers()
                    return
                request = ExportLogsServiceRequest.FromString(body)
                for rl in request.resource_logs:
                    for sl in rl.scope_logs:
                        for r in sl.log_records:
                            attrs = {a.key: _value(a.value) for a in r.attributes}
                            receiver.records.append((attrs, r))
                reply = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/logs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


def _value(v: object) -> object:
    kind = v.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(v, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


MEASURES = ("ndcg", "hit", "precision")


def drain_in_a_fork(settings) -> None:
    """One drain job in a forked child, as RQ runs it in a work horse (the exporter is built
    after the fork). Not through an RQ burst worker: its pubsub thread, blocked in a 60 s read,
    can hold up the worker's end for a minute."""
    ctx = build_context(settings)
    set_context(ctx)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                code = 0 if jobs.drain().get("done") else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        set_context(None)
        ctx.store.client.close()


@pytest.mark.process  # forks a work horse
def test_each_judged_event_sends_one_linked_record_per_chosen_measure(
    make_api, receiver, monkeypatch
):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20k-1")
    api = make_api(RAGMON_OTLP_EXPORT_ENDPOINT=receiver.url,
                   RAGMON_OTLP_EXPORT_MEASURES=",".join(MEASURES))  # fmt: skip
    s = span(retriever_attrs(metadata={"retriever": "bm25"}))
    r = api.client.post("/v1/traces", content=export([s]).SerializeToString(),
                        headers={"content-type": "application/x-protobuf"})  # fmt: skip
    assert r.status_code == 200
    otlp_id = f"{s.trace_id.hex()}-{s.span_id.hex()}"
    sdk = make_event(trace_id="ab" * 16)  # an SDK event carrying a W3C trace id, no span id
    plain = make_event(seed=1)  # no trace id: linked by ragmon.event_id only
    for e in (sdk, plain):
        assert api.client.post("/v1/retrievals", json=e).status_code == 202
    drain_in_a_fork(api.settings)

    urls = {otlp_id: f"/v1/retrievals/{otlp_id}?app=support-bot",
            sdk["event_id"]: result_url(sdk), plain["event_id"]: result_url(plain)}  # fmt: skip
    got = {i: api.client.get(u).json() for i, u in urls.items()}
    assert all(g["status"] == "done" for g in got.values()), got
    # sent before the job ended: no wait
    by_event: dict[str, dict[str, object]] = {}
    for attrs, rec in receiver.records:
        assert rec.event_name == "gen_ai.evaluation.result"
        by_event.setdefault(attrs["ragmon.event_id"], {})[attrs["gen_ai.evaluation.name"]] = (
            attrs["gen_ai.evaluation.score.value"],
            rec.trace_id.hex(),
            rec.span_id.hex(),
        )
    assert len(receiver.records) == 3 * len(MEASURES)  # one per chosen measure, sent once
    assert set(receiver.keys) == {"Bearer k-1"}
    assert sorted(by_event) == sorted(urls)
    for event_id, measures in by_event.items():
        assert sorted(measures) == sorted(MEASURES)
        assert {m: v[0] for m, v in measures.items()} == {
            m: got[event_id]["measures"][m] for m in MEASURES
        }
    links = {i: {v[1:] for v in m.values()} for i, m in by_event.items()}
    assert links[otlp_id] == {(s.trace_id.hex(), s.span_id.hex())}  # the retrieval span
    assert links[sdk["event_id"]] == {("ab" * 16, "")}
    assert links[plain["event_id"]] == {("", "")}
    assert sample_value(api.client.get("/metrics").text, "ragmon_evaluations_exported_total",
                        {"outcome": "sent"}) == 3 * len(MEASURES)  # fmt: skip


def test_a_hanging_receiver_never_holds_up_judging_and_what_it_missed_is_counted(
    settings, monkeypatch
):
    receiver = Receiver(hold=True)
    monkeypatch.setattr(evaluations, "DELAY_MS", 10)
    monkeypatch.setattr(evaluations, "EXPORT_TIMEOUT_S", 60.0)  # only the job's close bounds it
    store = Store.connect(replace(settings, otlp_export_endpoint=receiver.url))
    try:

        async def run() -> dict[str, int]:
            post(store, 2)
            job = asyncio.ensure_future(jobs.drain_pending(build_context(store.settings, store)))
            while not receiver.waiting:  # the first record's export is stuck in the receiver
                assert not job.done(), job.result()
                await asyncio.sleep(0.02)
            later = await asyncio.to_thread(post, store, 3)
            while store.statuses([later]) != ["done"]:
                assert not job.done(), job.result()
                await asyncio.sleep(0.02)
            assert not receiver.gate.is_set()  # judged while the export still waited
            return await job  # ends after its idle time; its close waits at most CLOSE_S

        counts = asyncio.run(run())
    finally:
        receiver.stop()
    assert counts.get("done") == 2
    out = {k.split("|")[1]: v for k, v in store.counters().items()
           if k.startswith("evaluations_exported|")}  # fmt: skip
    assert "sent" not in out and out.get("failed", 0) + out.get("dropped", 0) == 2
