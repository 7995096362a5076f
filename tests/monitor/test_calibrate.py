"""`ragmon calibrate`: both input formats, the lexical and the LLM judge, the report."""

from __future__ import annotations

import io
import json
import re

import pytest

from ragmon.calibrate.analysis import analyse
from ragmon.calibrate.command import run_calibrate
from ragmon.calibrate.grade import Outcome
from ragmon.calibrate.markdown import render
from ragmon.core.agreement import weighted_kappa
from ragmon.core.golden import Record, parse_records
from ragmon.core.measures import MeasureParams
from ragmon.settings import Settings
from tests.support.cli import run_ragmon
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.stack import clean_env, free_port

# ---- the command -------------------------------------------------------------------------------


def _run(settings: Settings, path, limit=None) -> tuple[int, str]:
    out = io.StringIO()
    code = run_calibrate(path, settings, limit=limit, out=out)
    return code, out.getvalue()


def _matrix(report: str) -> list[list[int]]:
    rows = re.findall(r"^\| ([0-3]) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| \d+ \|$", report, re.M)
    return [[int(x) for x in row[1:]] for row in rows]


def _kappas(report: str) -> tuple[float, float]:
    b = float(re.search(r"binary \(relevant = grade >= 2\): (-?[\d.]+)", report).group(1))
    q = float(re.search(r"quadratic-weighted 0-3: +(-?[\d.]+)", report).group(1))
    return b, q


def test_trec_dl_with_the_lexical_judge(trec_dl, capsys):
    settings = Settings.from_env({"RAGMON_JUDGE": "lexical"}, dotenv=None)
    code, report = _run(settings, trec_dl / "trec-dl-top20.jsonl")
    assert code == 0, report
    assert "485 records, 97 queries, 5 retrievers" in report
    matrix = _matrix(report)
    assert len(matrix) == 4
    pairs = int(re.search(r"Agreement on (\d+) \(query, passage\) pairs", report).group(1))
    assert sum(map(sum, matrix)) == pairs > 3000  # every known-graded distinct pair of the top 20
    kb, kq = _kappas(report)
    assert -1 < kb < 0.5 and -1 < kq < 0.5  # a real, low kappa: lexical overlap is not relevance
    assert kq == pytest.approx(weighted_kappa(matrix, "quadratic"), abs=5e-4)
    for run in ("BM25", "BM25_RM3", "D_BERT_KD_TASB", "OPEN_AI_ADA2", "SPLADE_P_P_ENSEMBLE_DISTIL"):
        assert run in report
    ndcg = re.search(r"^\| nDCG@K \|(.*)\| (-?[\d.]+|n/a) \|$", report, re.M)
    assert ndcg and ndcg.group(2) != "n/a"
    # with known grades the dense and learned-sparse runs beat BM25 on nDCG@10, as published
    known = [float(x) for x in re.findall(r"([\d.]+) -> ", ndcg.group(1))]
    assert known[0] < min(known[2:])
    assert "calibrate: 485/485 records" in capsys.readouterr().err


def _golden_events(path) -> None:
    rows = [
        {
            "query": "What does the Personal plan cost?",
            "k": 2,
            "labels": {"retriever": "bm25"},
            "passages": [
                {"id": "a", "text": "The Personal plan costs $8 per month.", "grade": 3},
                {"id": "b", "text": "Invoices are emailed monthly.", "grade": 0},
                {"id": "c", "text": "The Personal plan has 1 TB of storage.", "grade": 1},
                {"id": "d", "text": "Reset a password under Settings.", "grade": 0},
            ],
        },
        {
            "query": "What does the Personal plan cost?",
            "k": 2,
            "labels": {"retriever": "dense"},
            "passages": [
                {"id": "c", "text": "The Personal plan has 1 TB of storage.", "grade": 1},
                {"id": "a", "text": "The Personal plan costs $8 per month.", "grade": 3},
                {"id": "e", "text": "Plans can be cancelled at any time.", "grade": None},
                {"id": "b", "text": "Invoices are emailed monthly.", "grade": 0},
            ],
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_event_format_with_the_llm_judge_judges_each_pair_once(tmp_path, redis_url):
    path = tmp_path / "golden.jsonl"
    _golden_events(path)
    with FakeLLM() as fake:
        settings = Settings.from_env(
            {"REDIS_URL": redis_url, "OPENAI_BASE_URL": fake.url, "OPENAI_API_KEY": "k"},
            dotenv=None,
        )
        code, report = _run(settings, path)
        probe, *calls = fake.chat_requests()  # one start-up probe of the endpoint, then grading
    assert code == 0, report
    assert "<<<PASSAGE" not in probe.prompt
    assert len(calls) == 5  # five distinct passages of one query, though seven are listed
    assert "Agreement on 4 (query, passage) pairs" in report
    assert "(1 more were judged but have no known grade)" in report
    assert "judge `gpt-4o-mini/umbrela-1/pointwise`" in report and "judge calls: 5" in report
    assert sum(map(sum, _matrix(report))) == 4
    assert "| bm25 | dense |" in report


def test_limit_and_a_fatal_judge_error_stops_early(tmp_path, redis_url):
    path = tmp_path / "golden.jsonl"
    _golden_events(path)
    assert len(parse_records(path.read_text().splitlines(), str(path), limit=1)) == 1
    with FakeLLM() as fake:
        # the start-up probe passes; the key is revoked during the run
        fake.script(Reply.text("0"), *[Reply.error(401, message="bad key")] * 10)
        settings = Settings.from_env(
            {"REDIS_URL": redis_url, "OPENAI_BASE_URL": fake.url, "RAGMON_JUDGE_CONCURRENCY": "1"},
            dotenv=None,
        )
        code, report = _run(settings, path)
    assert code == 1
    assert "STOPPED early: client_error" in report


@pytest.mark.slow
def test_calibrate_against_a_dead_endpoint_stops_at_once_with_one_line(tmp_path):
    """The real command: the judge's retries would take minutes; the probe says it first."""
    path = tmp_path / "golden.jsonl"
    _golden_events(path)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    r = run_ragmon(
        ["calibrate", str(path)], clean_env(OPENAI_BASE_URL=dead, OPENAI_API_KEY="sk-test")
    )
    assert r.returncode == 1
    assert r.stdout == ""  # no report of nothing
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line == (
        f"ragmon calibrate: judge endpoint {dead} is unreachable (connection refused): check "
        "OPENAI_BASE_URL and that the server is up"
    )


def test_bad_input_and_missing_judge(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q", "k": 1, "passages": [{"id": "a", "text": "t", "grade": 7}]}\n')
    lexical = Settings.from_env({"RAGMON_JUDGE": "lexical"}, dotenv=None)
    assert _run(lexical, bad)[0] == 2
    assert "bad.jsonl:1: known grade 7" in capsys.readouterr().err
    no_llm = Settings.from_env({}, dotenv=None)
    assert _run(no_llm, bad)[0] == 2
    assert "no LLM judge configured" in capsys.readouterr().err


def _pool_gap_records() -> tuple[list[Record], Outcome]:
    """Three retrievers on six queries. The judge agrees with every known grade, but C also
    ranks first a passage nobody labelled, which the judge finds perfectly relevant."""
    records, outcome = [], Outcome()
    for qi in range(6):
        query = f"question {qi}"
        ranked = {
            "A": [3, 2, 0, 0],
            "B": [0, 3, 2, 0],
            "C": [None, 0, 0, 3],
        }
        for retriever, grades in ranked.items():
            passages = []
            for j, g in enumerate(grades):
                text = f"{retriever}-{qi}-{j}" if g is None else f"{qi}-{j}-{g}"
                passages.append((text, text, g))
                outcome.grades[(query, text)] = 3 if g is None else g
            records.append(Record(query, 2, retriever, passages))
    return records, outcome


def test_tau_on_the_shared_pool_does_not_count_pool_gaps_as_judge_errors() -> None:
    records, outcome = _pool_gap_records()
    res = analyse(records, outcome, MeasureParams())
    tau, lo, hi = res["tau_shared"]["ndcg"]
    assert tau == pytest.approx(1.0)  # on labelled passages the judge orders A > B > C too
    assert res["tau"]["ndcg"] < 1.0  # with the unlabelled passage C climbs: the order changes
    assert lo <= tau <= hi
    text = render(res, [], 2)
    assert "Kendall tau, shared pool [95% CI]" in text and "every judge grade" in text
