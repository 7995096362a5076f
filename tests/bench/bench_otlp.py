"""Ingest of OpenTelemetry traces: `POST /v1/traces` against `POST /v1/retrievals/batch`, on the
same events, on the same `ragmon serve`.

    .venv/bin/python -m tests.bench.bench_otlp [--short] [--seconds 10] [--rounds 3]
                                                [--batch-size 100] [--connections 4] [--json F]

Each request carries `--batch-size` retrievals (K=10, 20 TREC DL passages each, ids and scores,
labels app/index/retriever), with fresh ids per request:

- the baseline: `POST /v1/retrievals/batch`, JSON events, as the SDK sends them;
- `/v1/traces` with the OpenInference retriever spans of the same retrievals (query in
  `input.value`, 20 `retrieval.documents.{i}.document.{id,content,score}`, labels in `metadata`),
  as OTLP protobuf (what the SDK's exporter and the Collector send), as OTLP/JSON, and as
  protobuf with 3 other spans per retrieval (a chain, an embedding and an LLM span: an exporter
  sending everything, no Collector filter).

All variants alternate round by round on one server and one Redis, flushed between runs, with
the same asyncio closed-loop client (`--connections` keep-alive connections). Server and Redis
CPU time per event come from /proc: on a shared machine they are steadier than events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.bench.bench_ingest import cpu_seconds
from tests.bench.common import (
    Bodies,
    K,
    Load,
    batch_template,
    closed_loop,
    data_source,
    exit_on_sigterm,
    machine,
    ms,
    topics,
)
from tests.support.spans import attributes, otlp_json
from tests.support.stack import ragmon_env, redis_server, start_api

MARK = b"\xab" * 8  # the first half of every trace id in a template: replaced per request
MARK_HEX = MARK.hex().encode()
LABELS = {"retriever": "bm25", "index": "trec", "k": K}
OTHER_SPANS = 3


@dataclass
class Variant:
    name: str
    path: str
    content_type: str
    next_body: Callable[[], bytes]
    spans_per_event: int = 1
    runs: list[tuple[Load, float, float]] = field(default_factory=list)  # load, us/ev server, redis

    def median(self) -> tuple[float, float, float, Load]:
        """Median events/s, server and Redis CPU per event, and the run with the median rate."""
        by_rate = sorted(self.runs, key=lambda r: r[0].rps)
        return (
            statistics.median(r[0].rps for r in self.runs),
            statistics.median(r[1] for r in self.runs),
            statistics.median(r[2] for r in self.runs),
            by_rate[len(by_rate) // 2][0],
        )


def export_template(pairs: list[tuple[str, list[str]]], size: int, others: int) -> bytes:
    """An OTLP export of `size` retriever spans (and `others` other spans each), as protobuf."""
    spans = []
    start = time.time_ns()
    for i in range(size):
        query, texts = pairs[i % len(pairs)]
        attrs = {"openinference.span.kind": "RETRIEVER", "input.value": query,
                 "metadata": json.dumps(LABELS)}  # fmt: skip
        for j, text in enumerate(texts):
            attrs[f"retrieval.documents.{j}.document.id"] = f"d{i}-{j}"
            attrs[f"retrieval.documents.{j}.document.content"] = text
            attrs[f"retrieval.documents.{j}.document.score"] = round(20.0 - j * 0.37, 3)
        trace_id = MARK + i.to_bytes(8, "big")
        spans.append(span(trace_id, 1, "BM25Retriever", start, attrs))
        kinds = [("RagChain", "CHAIN", {"input.value": query}),
                 ("Embed", "EMBEDDING", {"embedding.model_name": "minilm"}),
                 ("ChatOpenAI", "LLM", {"llm.model_name": "gpt-4o-mini",
                                        "llm.token_count.prompt": 1800})]  # fmt: skip
        for n, (name, kind, extra) in enumerate(kinds[:others]):
            other = {"openinference.span.kind": kind, **extra}
            spans.append(span(trace_id, n + 2, name, start, other))
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    rs.resource.attributes.extend(attributes({"service.name": "bench"}))
    return ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()


def span(trace_id: bytes, n: int, name: str, start: int, attrs: dict) -> Span:
    return Span(trace_id=trace_id, span_id=n.to_bytes(8, "big"), name=name,
                start_time_unix_nano=start, end_time_unix_nano=start + 2_000_000,
                attributes=attributes(attrs))  # fmt: skip


def fresh_ids(template: bytes, mark: bytes, width: int) -> Callable[[], bytes]:
    """Bodies from `template` with `mark` replaced by a value unique to each request."""
    nonce = uuid.uuid4().int >> 96
    counter = iter(range(1, 1 << 60))

    def next_body() -> bytes:
        value = (nonce << 28 | next(counter)).to_bytes(8, "big")
        return template.replace(mark, value if width == 8 else value.hex().encode())

    return next_body


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.bench_otlp", description=__doc__)
    p.add_argument("--short", action="store_true", help="a few seconds in all (CI)")
    p.add_argument("--seconds", type=float, default=None, help="per run (default 10)")
    p.add_argument("--rounds", type=int, default=None, help="alternations (default 3)")
    p.add_argument("--batch-size", type=int, default=100, help="retrievals per request")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args(argv)
    exit_on_sigterm()
    seconds = args.seconds or (1.5 if args.short else 10.0)
    rounds = args.rounds or (1 if args.short else 3)
    size = args.batch_size

    pairs = topics(short=args.short)
    protobuf = export_template(pairs, size, 0)
    mixed = export_template(pairs, size, OTHER_SPANS)
    request = ExportTraceServiceRequest()
    request.ParseFromString(protobuf)
    as_json = otlp_json(request)
    batch = batch_template(pairs, size)
    variants = [
        Variant("/v1/retrievals/batch (JSON)", "/v1/retrievals/batch", "application/json",
                Bodies(batch).next),
        Variant("/v1/traces (protobuf)", "/v1/traces", "application/x-protobuf",
                fresh_ids(protobuf, MARK, 8)),
        Variant("/v1/traces (OTLP/JSON)", "/v1/traces", "application/json",
                fresh_ids(as_json, MARK_HEX, 16)),
        Variant(f"/v1/traces (protobuf, +{OTHER_SPANS} spans)", "/v1/traces",
                "application/x-protobuf", fresh_ids(mixed, MARK, 8), 1 + OTHER_SPANS),
    ]  # fmt: skip
    print(machine())
    print(f"data: {data_source()}")
    sizes = ", ".join(
        f"{name} {len(body) / 1e6:.2f} MB"
        for name, body in (("JSON batch", batch.encode()), ("OTLP protobuf", protobuf),
                           ("OTLP/JSON", as_json), (f"protobuf +{OTHER_SPANS} spans", mixed))
    )  # fmt: skip
    print(f"request: {size} retrievals (K={K}, 20 passages each): {sizes}")
    print(f"load: asyncio closed loop, {args.connections} connections, {seconds:g} s per run, "
          f"{rounds} round(s) alternating")  # fmt: skip

    with redis_server() as rs:
        flush = redis.Redis.from_url(rs.url)
        proc, url = start_api(ragmon_env(rs.url, RAGMON_QUEUE_LIMIT="100000000"))
        assert rs.proc is not None
        try:
            for v in variants:  # warm-up (imports, first connections), not counted
                asyncio.run(run(url, v, min(1.0, seconds), args.connections))
            flush.flushall()
            for _ in range(rounds):
                for v in variants:
                    c0, r0 = cpu_seconds(proc.pid), cpu_seconds(rs.proc.pid)
                    load = asyncio.run(run(url, v, seconds, args.connections))
                    events = max(1, load.requests * size)
                    v.runs.append((load, (cpu_seconds(proc.pid) - c0) / events,
                                   (cpu_seconds(rs.proc.pid) - r0) / events))  # fmt: skip
                    stored = sum(1 for _ in flush.scan_iter("ragmon:ev:*", count=10_000))
                    flush.flushall()  # every run starts from an empty Redis
                    if stored != load.requests * size:  # every span became an event, once
                        raise RuntimeError(f"{v.name}: {stored} events stored, "
                                           f"{load.requests * size} sent")  # fmt: skip
        finally:
            proc.stop()
            flush.close()

    base = variants[0].median()
    print()
    print(f"{'':34s}{'events/s':>10s}{'ratio':>8s}{'server CPU':>12s}{'ratio':>8s}"
          f"{'Redis CPU':>11s}{'p50 ms':>9s}{'p99 ms':>9s}")  # fmt: skip
    print(f"{'(median of the runs)':34s}{'':>10s}{'':>8s}{'us/event':>12s}{'':>8s}"
          f"{'us/event':>11s}")  # fmt: skip
    figures = {}
    for v in variants:
        rps, cpu, red, load = v.median()
        rate = rps * size
        figures[v.name] = {"events_per_s": rate, "server_cpu_us_per_event": cpu * 1e6,
                           "redis_cpu_us_per_event": red * 1e6, "p50_s": load.p50,
                           "p99_s": load.p99}  # fmt: skip
        ratios = f"{rps / base[0]:7.2f}x{cpu * 1e6:12,.0f}{cpu / base[1]:7.2f}x"
        print(f"{v.name:34s}{rate:10,.0f}{ratios}{red * 1e6:11,.0f}"
              f"{ms(load.p50):>9s}{ms(load.p99):>9s}")  # fmt: skip
    mixed_v = variants[-1]
    print(
        f"server CPU per span, {mixed_v.name}: "
        f"{mixed_v.median()[1] * 1e6 / mixed_v.spans_per_event:,.0f} us"
    )
    for v in variants:
        print(
            f"events/s of each run, {v.name}: "
            + ", ".join(f"{r[0].rps * size:,.0f}" for r in v.runs)
        )
    errors = sum(r[0].errors for v in variants for r in v.runs)
    print(f"errors (non-2xx, socket): {errors}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "batch_size": size, "variants": figures,
                       "errors": errors, "at": time.time()}, f, indent=2)  # fmt: skip
    return 0 if errors == 0 else 1


async def run(url: str, v: Variant, seconds: float, connections: int) -> Load:
    """A closed-loop run; `Load.requests` counts requests (events = requests x batch size)."""
    return await closed_loop(url + v.path, v.next_body, seconds, connections, v.content_type)


if __name__ == "__main__":
    sys.exit(main())
