"""What `ragmon serve` and `ragmon worker` say at start: never a password, always the essentials."""

from __future__ import annotations

import pytest

from ragmon.preflight import describe, judge_url, redact_url
from ragmon.settings import Settings


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
        (
            "rediss://ragmon:s3cret@cache.example.com:6380/2",
            "rediss://ragmon:***@cache.example.com:6380/2",
        ),
        ("redis://ragmon@redis:6379", "redis://ragmon@redis:6379"),
        ("unix:///run/redis.sock?db=1&password=s3cret", "unix:///run/redis.sock?db=1&password=***"),
        ("https://user:s3cret@llm.example.com/v1", "https://user:***@llm.example.com/v1"),
    ],
)
def test_redact_url_hides_passwords_only(url, shown):
    assert redact_url(url) == shown


def test_describe_names_redis_judge_model_endpoint_sampling_budget():
    s = Settings.from_env(
        {
            "REDIS_URL": "redis://:s3cret@redis:6379/0",
            "OPENAI_BASE_URL": "http://vllm.internal:8000/v1",
            "RAGMON_JUDGE_MODEL": "qwen2.5-7b",
            "RAGMON_SAMPLE_RATE": "0.25",
            "RAGMON_DAILY_BUDGET_USD": "12.5",
        },
        dotenv=None,
    )
    line = describe(s)
    assert "s3cret" not in line and "\n" not in line
    assert line == (
        "redis=redis://:***@redis:6379/0 queue=ragmon judge=openai model=qwen2.5-7b "
        "endpoint=vllm.internal mode=pointwise sampling=fixed 0.25 budget=12.5 USD/day"
    )
    assert judge_url(s) == "http://vllm.internal:8000/v1"
    lexical = Settings.from_env({"RAGMON_JUDGE": "lexical"}, dotenv=None)
    assert "judge=lexical" in describe(lexical) and "budget=none" in describe(lexical)
    # the default mode, said as it is (it once said sampling=1 with planned set)
    assert "sampling=planned (weekly ±0.03 per series, at least 100/day)" in describe(lexical)
    assert judge_url(lexical) == "https://api.openai.com/v1"
