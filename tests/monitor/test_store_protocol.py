"""The Python-Lua protocol (`ragmon.store.protocol`): every script reads only the KEYS and ARGV
positions and lists it names, parses no JSON, names no stored field of its own, and its argument
builders fill exactly those positions, in order."""

from __future__ import annotations

import inspect
import re

import pytest
import redis

from ragmon.core.catalog import ALL as METRICS
from ragmon.core.measures import histogram_bounds
from ragmon.core.wire import (
    LABEL_KEYS,
    LABEL_PATTERN,
    field_name,
    field_parts,
    series_app,
    series_labels,
    series_name,
    series_values,
)
from ragmon.settings import Settings
from ragmon.store import judge_state as judging
from ragmon.store import scripts
from ragmon.store.fields import Name
from ragmon.store.finish import finish_call
from ragmon.store.keys import OTHER, Keys, fold
from ragmon.store.protocol import Script

SCRIPTS = [*scripts.ALL, judging.ACQUIRE, judging.SETTLE]
# Literals a script may spell: Redis commands and options, number formats, the deadline error,
# the judge limiter's own `id:tokens` members (read and written only by its two scripts), and
# the patterns reading an event's signals (`records.signal_record`, read only by INGEST), and
# Redis' type names (FINISH checks its keys' types before its first write), Lua's `string`,
# the pool's `<grade> <seen>` entries, and the parts of the ledger's position names
# (`K['lg_' .. kind .. '_rate']`).
LITERALS = {"", "-inf", "%.17g", "%d", "0", ":", ":(%d+)$", "^(%d+) (%d+) (%S+)(.*)$",
            "%S+", "^(%d+):(%S+)$", " ", "hash", "zset", "list", "set", "none", "string",
            "^(%d+) (%d+)$", "lg_", "_rate", "_ttl", "_rate_ttl"}  # fmt: skip


SCRIPTS = [*SCRIPTS, *(s for s in (scripts.HUMAN_GRADES, scripts.POOL) if s not in SCRIPTS)]


def named(table: str, body: str, declared: tuple[str, ...]) -> set[str]:
    """The positions of `table` (K or A) a body reads: `K.name`, and for a name built from a
    prefix (`K['lg_' .. kind]`, the ledger's `charge`) every declared name with that prefix."""
    used = set(re.findall(rf"\b{table}\.(\w+)", body))
    for prefix in re.findall(rf"\b{table}\['(\w+)' \.\.", body):
        used |= {n for n in declared if n.startswith(prefix)}
    return used


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_script_reads_the_positions_it_names_and_no_other(script: Script) -> None:
    assert not re.findall(r"(?:KEYS|ARGV)\[\d", script.body), "a position by number"
    assert named("K", script.body, script.keys) == set(script.keys)
    assert named("A", script.body, script.args) == set(script.args)
    assert named("L", script.body, script.lists) == set(script.lists)
    assert len(set(script.lists)) == len(script.lists)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_script_parses_no_json(script: Script) -> None:
    """Lua gets scalars and lists of scalars: what it stores of a record comes encoded from
    Python (`ragmon.store.records`), what it compares is a scalar of its own."""
    assert "cjson" not in script.source and "cmsgpack" not in script.source


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_a_script_spells_no_stored_name(script: Script) -> None:
    code = re.sub(r"--[^\n]*", "", script.body)
    spelled = [
        x
        for x in re.findall(r"'([^']*)'", code)
        if not x.isupper() and x not in LITERALS and not x.startswith(("DEADLINE ", "STAGED "))
    ]
    assert not spelled


def test_the_header_binds_each_name_to_its_position() -> None:
    source = scripts.FINISH.source
    assert "local K = {event = KEYS[1], hist = KEYS[2]," in source
    assert f"lg_record_rate = KEYS[{len(scripts.FINISH.keys)}]}}" in source
    assert "n_obs = ARGV[19], weight = ARGV[20]," in source and len(scripts.FINISH.args) == 24
    assert "lg_record_rate_ttl = ARGV[24]}" in source
    assert "local KEYS_REST, ARGV_REST = 18, 25\n" in source
    assert "ipairs({'series_counts'})" in source
    assert "local F = {payload = 'p', status = 's'," in source


def test_call_takes_every_name_and_only_those() -> None:
    script = Script("T", ("a", "b"), ("x",), "")
    call = script.call({"b": "kb", "a": "ka"}, {"x": 1}, more_keys=["k3"], more_args=[2, 3])
    assert call == (["ka", "kb", "k3"], [1, 2, 3])
    with pytest.raises(ValueError, match="do not name"):
        script.call({"a": "ka"}, {"x": 1})
    with pytest.raises(ValueError, match="do not name"):
        script.call({"a": "ka", "b": "kb"}, {"x": 1, "y": 2})
    with pytest.raises(ValueError, match="do not name"):
        script.call({"a": "ka", "b": "kb"}, {"x": 1}, lists={"u": []})


def test_lists_follow_the_named_arguments_each_with_its_length(settings: Settings) -> None:
    """A script reads each declared list whole, whatever its length, and the tail after them."""
    script = Script(
        "T", (), ("x",), "return {A.x, #L.u, #L.v, L.v[1] or '', ARGV[ARGV_REST]}", ("u", "v")
    )
    call = script.call({}, {"x": "x"}, more_args=["tail"], lists={"v": ["v1"], "u": []})
    assert call.args == ["x", 0, 1, "v1", "tail"]
    client = redis.Redis.from_url(settings.redis_url)
    try:
        reply = client.eval(script.source, 0, *call.args)
    finally:
        client.close()
    assert reply == [b"x", 0, 1, b"v1", b"tail"]


def test_series_name_and_fold_follow_the_label_order() -> None:
    labels = {"segment": "faq", "retriever": "bm25", "app": "shop", "index": "kb"}
    assert LABEL_KEYS == ("app", "index", "retriever", "segment")
    assert series_name(labels) == "shop|kb|bm25|faq"
    assert series_labels("shop|kb|bm25|faq") == labels  # the one codec, both ways
    assert series_values("shop|kb|bm25|faq") == ("shop", "kb", "bm25", "faq")
    assert series_app("shop|kb|bm25|faq") == "shop"
    assert field_parts(field_name("judge_tokens", "m", "input")) == ["judge_tokens", "m", "input"]
    assert fold("shop") == ("shop|other|other|other", "series_folded|shop")
    assert fold(OTHER) == ("other|other|other|other", "series_folded|other")


def test_the_metric_names_the_scripts_write_are_in_the_catalog() -> None:
    keys = {m.key for m in METRICS}
    per_day = {Name.EVENTS, Name.K_SUM, Name.GRADES}
    assert {n for n in Name if n not in per_day} <= keys


def test_the_finish_builder_fills_finish_s_positions() -> None:
    settings = Settings(redis_url="")
    keys = Keys("t")
    bounds = histogram_bounds(settings.measure_params())
    labels = {"app": "shop", "index": "kb", "retriever": "bm25", "segment": "faq"}
    event = {
        "event_id": "e1", "timestamp": "2026-11-20T10:00:00+00:00", "query": "q", "k": 2,
        "labels": labels, "passages": [{"id": "a"}, {"id": "b"}], "_received_at": 100.0,
    }  # fmt: skip
    result = {"labels": labels, "measures": {"ndcg": 0.5, "hit": 1.0}}
    call = finish_call(
        keys, settings, bounds, event, result, [3, None], 160.0, series_counts={"x|why": 2}
    )
    named = dict(zip(scripts.FINISH.keys, call.keys, strict=True))
    assert named["event"] == keys.event("shop|e1") and named["failed"] == keys.failed
    assert named["day_events"] == keys.day_events("2026-11-20", "shop")
    assert named["day_apps"] == keys.day_apps("2026-11-20")
    args = dict(zip(scripts.FINISH.args, call.args, strict=False))
    assert (args["series"], args["folded"], args["orphan"]) == (
        "shop|kb|bm25|faq", "shop|other|other|other", "other|other|other|other",
    )  # fmt: skip
    assert args["lag"] == "60.0"
    listed = call.args[len(scripts.FINISH.args) :]
    assert listed[:4] == [3, "x", "why", 2]  # series_counts: its length, then its triple
    tail = listed[4:]
    assert args["n_obs"] == 2 and len(tail) == 3 * 2 + 1  # two measures, one grade
    assert tail[0::3][:2] == ["retrieval_ndcg", "retrieval_hit"] and tail[-1] == 3


def test_every_script_compiles(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.redis_url)
    try:
        for script in SCRIPTS:
            assert client.script_load(script.source)
    finally:
        client.close()


def test_no_app_name_makes_a_key_of_the_fleet() -> None:
    """A key of one app (a method of `Keys` taking `app` alone) is never one of the keys the
    fleet shares (a property): an app named `at` once had its estimates in the key that
    records when every app was summarized."""
    keys = Keys()
    shared = {
        getattr(keys, name)
        for name, attr in vars(Keys).items()
        if isinstance(attr, property) and isinstance(getattr(keys, name), str)
    }
    per_app = [
        getattr(keys, name)
        for name, attr in vars(Keys).items()
        if callable(attr) and list(inspect.signature(attr).parameters) == ["self", "app"]
    ]
    assert len(shared) >= 10 and len(per_app) >= 5
    clashes = []
    for key_of in per_app:
        head = key_of("\0").split("\0")[0]  # the key before the app's name
        for key in shared:
            app = key.removeprefix(head)
            if key.startswith(head) and re.match(LABEL_PATTERN, app) and key_of(app) == key:
                clashes.append((key_of.__name__, app))
    assert clashes == []
