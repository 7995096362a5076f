"""deploy/otel-collector.yaml: a complete Collector config that sends ragmon the retriever spans.

No Collector binary here: the checks read the config as the Collector would (every component a
pipeline names is defined), and apply its filter condition to real spans to show that what it
keeps is what `POST /v1/traces` turns into events.
"""

from __future__ import annotations

import re

from ragmon.api import genai
from ragmon.api.spans import RETRIEVER, SPAN_KIND, SpanMap, map_request
from ragmon.settings import Settings
from tests.deploy.conftest import DEPLOY, load_yaml
from tests.support.spans import export, retriever_attrs, span

CONFIG = DEPLOY / "otel-collector.yaml"
CONDITION = re.compile(r'^attributes\["(?P<key>[^"]+)"\] != "(?P<value>[^"]+)"$')


def test_every_component_a_pipeline_names_is_defined():
    config = load_yaml(CONFIG)
    pipelines = config["service"]["pipelines"]
    for name, pipeline in pipelines.items():
        assert name.startswith("traces"), name
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, ()):
                assert component in config[kind], f"{name}: {kind} {component} is not defined"
    ragmon = pipelines["traces/ragmon"]
    assert "filter/retrievers" in ragmon["processors"]
    exporter = config["exporters"][ragmon["exporters"][0]]
    assert exporter["endpoint"] == "${env:RAGMON_URL}"  # otlphttp appends /v1/traces
    assert exporter["headers"]["Authorization"] == "Bearer ${env:RAGMON_API_KEY}"
    assert exporter["encoding"] == "proto" and exporter["retry_on_failure"]["enabled"]


def test_the_filter_keeps_exactly_the_spans_ragmon_reads():
    (condition,) = load_yaml(CONFIG)["processors"]["filter/retrievers"]["traces"]["span"]
    parts = [CONDITION.match(part) for part in condition.split(" and ")]
    assert all(parts), condition
    wanted = {(m["key"], m["value"]) for m in parts if m}
    assert wanted == {(SPAN_KIND, RETRIEVER), (genai.OPERATION, genai.RETRIEVAL)}
    retrieval = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.retrieval.query.text": "q",
        "gen_ai.retrieval.documents": '[{"id": "a", "score": 1, "content": "A."}]',
    }
    spans = [span(retriever_attrs()), span({"openinference.span.kind": "LLM"}),
             span({"http.route": "/ask"}), span(retriever_attrs(query="another")),
             span(retrieval), span({"gen_ai.operation.name": "chat"})]  # fmt: skip

    def dropped(s) -> bool:  # every condition holds (a missing attribute is not equal)
        values = {a.key: a.value.string_value for a in s.attributes}
        return all(values.get(key) != value for key, value in wanted)

    kept = [s for s in spans if not dropped(s)]
    span_map = SpanMap.from_settings(Settings())
    everything = map_request(export(spans), span_map)
    filtered = map_request(export(kept), span_map)
    assert len(filtered.events) == len(everything.events) == 3
    assert filtered.ignored == 0 and everything.ignored == 3
