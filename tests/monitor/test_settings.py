"""Settings: defaults, every variable parsed, bad values named, `.env` handling."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from ragmon.core.measures import MeasureParams
from ragmon.environment import read_dotenv, unknown_variables
from ragmon.setting_values import DEFAULT_PRICES, SettingsError
from ragmon.settings import DEFAULT_JUDGE_MODEL, Settings, env_variables

# Variables docs/configuration.md lists: each must be read (tests/test_docs.py checks them all).
DOCUMENTED_VARIABLES = {
    "REDIS_URL",
    "RAGMON_API_KEYS",
    "RAGMON_JUDGE",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "RAGMON_JUDGE_MODEL",
    "RAGMON_SAMPLE_RATE",
    "RAGMON_DAILY_BUDGET_USD",
    "RAGMON_RELEVANT_GRADE",
    "RAGMON_T_ALPHA",
    "RAGMON_F_ALPHA",
    "RAGMON_NDCG_GAIN",
    "RAGMON_HARM_GRADES",
    "RAGMON_MAX_SERIES",
    "RAGMON_RESULT_TTL_DAYS",
}

KEY = "k" * 16  # the shortest accepted API key


def load(env: dict[str, str], dotenv: str | Path | None = None) -> Settings:
    return Settings.from_env(env, dotenv=dotenv)


def test_defaults() -> None:
    s = load({})
    assert s == Settings()
    assert s.redis_url is None
    assert s.api_keys == () and s.metrics_api_keys == ()
    assert s.judge == "openai"
    assert s.openai_api_key is None and s.openai_base_url is None
    assert s.judge_model == DEFAULT_JUDGE_MODEL
    assert s.sample_rate == 1.0
    assert s.daily_budget_usd == 0.0
    # The measure parameters default to the documented ones, i.e. to MeasureParams'.
    p = MeasureParams()
    assert (s.relevant_grade, s.t_alpha, s.f_alpha, s.ndcg_gain, s.harm_grades) == (
        p.relevant_grade,
        p.t_alpha,
        p.f_alpha,
        p.ndcg_gain,
        p.harm_grades,
    )
    assert s.max_series == 500
    assert s.result_ttl_days == 35.0
    assert s.prices == DEFAULT_PRICES
    assert not s.judge_configured


def test_every_design_variable_is_read() -> None:
    assert set(env_variables()) >= DOCUMENTED_VARIABLES
    assert len(env_variables()) == len(set(env_variables())) == len(fields(Settings))


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGMON_MAX_SERIES", "77")
    assert Settings.from_env(dotenv=None).max_series == 77


@pytest.mark.parametrize(
    ("variable", "raw", "attribute", "expected"),
    [
        ("REDIS_URL", "redis://127.0.0.1:6379/2", "redis_url", "redis://127.0.0.1:6379/2"),
        ("REDIS_URL", " rediss://h:6380/0 ", "redis_url", "rediss://h:6380/0"),
        ("REDIS_URL", "unix:///tmp/redis.sock", "redis_url", "unix:///tmp/redis.sock"),
        (
            "REDIS_URL",
            "redis+sentinel://s1:26379,s2/main/1",
            "redis_url",
            "redis+sentinel://s1:26379,s2/main/1",
        ),
        ("REDIS_URL", "", "redis_url", None),
        ("RAGMON_API_KEYS", f"{KEY}, {KEY}2:app", "api_keys", (KEY, f"{KEY}2:app")),
        ("RAGMON_METRICS_API_KEYS", KEY, "metrics_api_keys", (KEY,)),
        ("RAGMON_JUDGE", "lexical", "judge", "lexical"),
        ("RAGMON_JUDGE", " OpenAI ", "judge", "openai"),
        ("OPENAI_API_KEY", "sk-test", "openai_api_key", "sk-test"),
        (
            "OPENAI_BASE_URL",
            "http://127.0.0.1:8000/v1",
            "openai_base_url",
            "http://127.0.0.1:8000/v1",
        ),
        ("RAGMON_JUDGE_MODEL", " gpt-4.1-nano ", "judge_model", "gpt-4.1-nano"),
        ("RAGMON_JUDGE_MODE", "listwise", "judge_mode", "listwise"),
        ("RAGMON_JUDGE_CONCURRENCY", "8", "judge_concurrency", 8),
        ("RAGMON_JUDGE_RPM", "500", "judge_rpm", 500),
        ("RAGMON_JUDGE_TPM", "200000", "judge_tpm", 200_000),
        ("RAGMON_JUDGE_TIMEOUT", "2.5", "judge_timeout_s", 2.5),
        ("RAGMON_JUDGE_MAX_RETRIES", "0", "judge_max_retries", 0),
        ("RAGMON_SAMPLE_RATE", "0.25", "sample_rate", 0.25),
        ("RAGMON_SAMPLE_RATE", "0", "sample_rate", 0.0),
        ("RAGMON_DAILY_BUDGET_USD", "12.5", "daily_budget_usd", 12.5),
        ("RAGMON_SAMPLING", "planned", "sampling", "planned"),
        ("RAGMON_TARGET_HALF_WIDTH", "0.02", "target_half_width", 0.02),
        ("RAGMON_TARGET_HALF_WIDTH", "0", "target_half_width", 0.0),
        ("RAGMON_MIN_JUDGED_PER_DAY", "25", "min_judged_per_day", 25),
        ("RAGMON_RELEVANT_GRADE", "1", "relevant_grade", 1),
        ("RAGMON_RELEVANT_GRADE", "3", "relevant_grade", 3),
        ("RAGMON_T_ALPHA", "0.2", "t_alpha", 0.2),
        ("RAGMON_F_ALPHA", "1", "f_alpha", 1.0),
        ("RAGMON_NDCG_GAIN", "linear", "ndcg_gain", "linear"),
        ("RAGMON_NDCG_GAIN", "EXPONENTIAL", "ndcg_gain", "exponential"),
        ("RAGMON_HARM_GRADES", "0,1", "harm_grades", frozenset({0, 1})),
        ("RAGMON_HARM_GRADES", " 1 , 2 ,", "harm_grades", frozenset({1, 2})),
        ("RAGMON_MAX_SERIES", "2000", "max_series", 2000),
        ("RAGMON_MAX_SERIES_PER_APP", "20", "max_series_per_app", 20),
        ("RAGMON_SERIES_IDLE_DAYS", "0", "series_idle_days", 0.0),
        ("RAGMON_RESULT_TTL_DAYS", "7", "result_ttl_days", 7.0),
        ("RAGMON_TEXT_TTL_DAYS", "2.5", "text_ttl_days", 2.5),
        ("RAGMON_IDEMPOTENCY_S", "120", "idempotency_s", 120),
        ("RAGMON_MEMORY_HIGH", "0.8", "memory_high", 0.8),
        ("RAGMON_CACHE_TTL_DAYS", "0", "cache_ttl_days", 0.0),
        ("RAGMON_SHARED_CACHE", "true", "shared_cache", True),
        ("RAGMON_APP_STORAGE_MB", "search=0.5,2", "app_storage_mb", {"search": 0.5, "*": 2.0}),
        ("RAGMON_APP_GRADES_MB", "search=0,5", "app_grades_mb", {"search": 0.0, "*": 5.0}),
        ("RAGMON_ALLOWED_HOSTS", "API, .corp.example", "allowed_hosts", ("api", ".corp.example")),
        ("RAGMON_APP_DAILY_BUDGET_USD", "5", "app_daily_budget_usd", {"*": 5.0}),
        (
            "RAGMON_APP_DAILY_BUDGET_USD",
            "a=1.5, 2,b:x=0",
            "app_daily_budget_usd",
            {"a": 1.5, "*": 2.0, "b:x": 0.0},
        ),
        ("RAGMON_STORE_TEXT", "false", "store_text", False),
        ("RAGMON_STORE_TEXT", "Yes", "store_text", True),
        ("RAGMON_TEXT_KEYS", " " + "A" * 43 + "= ,", "text_keys", ("A" * 43 + "=",)),
        ("RAGMON_UTILITY", "on", "utility", True),
        ("RAGMON_JUDGE_SCALE", " Utility5 ", "judge_scale", "utility5"),
        ("RAGMON_QUEUE_LIMIT", "10", "queue_limit", 10),
        ("RAGMON_MAX_BODY_BYTES", "1048576", "max_body_bytes", 1_048_576),
        ("RAGMON_JOB_BATCH_SIZE", "1", "job_batch_size", 1),
        ("RAGMON_STORE_TIMEOUT_S", "2.5", "store_timeout_s", 2.5),
        ("RAGMON_WAIT_REPLICAS", "1", "wait_replicas", 1),
        ("RAGMON_WAIT_TIMEOUT_MS", "250", "wait_timeout_ms", 250),
        ("RAGMON_ANCHOR_FILE", __file__, "anchor_file", __file__),
        ("RAGMON_ANCHOR_SIZE", "500", "anchor_size", 500),
        ("RAGMON_ANCHOR_EVERY_HOURS", "1", "anchor_every_hours", 1),
        ("RAGMON_SECOND_JUDGE_MODEL", " gpt-4o ", "second_judge_model", "gpt-4o"),
        ("RAGMON_SECOND_JUDGE_RATE", "0.1", "second_judge_rate", 0.1),
        ("RAGMON_METRICS_REFRESH_S", "0", "metrics_refresh_s", 0.0),
        ("RAGMON_APP_SHARES", " big=3, small=0.5 ", "app_shares", {"big": 3.0, "small": 0.5}),
        ("RAGMON_METRICS_PROCESS", "false", "metrics_process", False),
        ("RAGMON_HEADER_TIMEOUT_S", "3", "header_timeout_s", 3.0),
        ("RAGMON_BODY_TIMEOUT_S", "30", "body_timeout_s", 30.0),
        ("RAGMON_MAX_CONNECTIONS", "100", "max_connections", 100),
        (
            "RAGMON_REPORT_WEBHOOK",
            "https://hooks.example/x",
            "report_webhook",
            "https://hooks.example/x",
        ),
        (
            "RAGMON_EXPLORER_URL",
            "https://ragmon.example.com",
            "explorer_url",
            "https://ragmon.example.com",
        ),
        ("RAGMON_ALERT_MARGIN_NDCG", "0.05", "alert_margin_ndcg", 0.05),
        ("RAGMON_ALERT_MARGIN_T", "0.25", "alert_margin_t", 0.25),
        ("RAGMON_ALERT_Z", "3", "alert_z", 3.0),
        ("RAGMON_ALERT_MIN_EVENTS", "100", "alert_min_events", 100),
        ("RAGMON_REPORT_KEEP", "3", "report_keep", 3),
        ("RAGMON_REPORT_DIR", "/var/ragmon", "report_dir", "/var/ragmon"),
        ("RAGMON_QUEUE", "ragmon-test", "queue_name", "ragmon-test"),
        (
            "RAGMON_OTLP_APP_ATTRIBUTES",
            "rag.app, service.name",
            "otlp_app_attributes",
            ("rag.app", "service.name"),
        ),
        ("RAGMON_OTLP_INDEX_ATTRIBUTES", "none", "otlp_index_attributes", ()),
        (
            "RAGMON_OTLP_RETRIEVER_ATTRIBUTES",
            "span.name",
            "otlp_retriever_attributes",
            ("span.name",),
        ),
        (
            "RAGMON_OTLP_SEGMENT_ATTRIBUTES",
            "metadata.tier",
            "otlp_segment_attributes",
            ("metadata.tier",),
        ),
        ("RAGMON_OTLP_K_ATTRIBUTES", "rag.k", "otlp_k_attributes", ("rag.k",)),
        ("RAGMON_OTLP_K", "bot=5, search=10,4", "otlp_k", {"bot": 5, "search": 10, "*": 4}),
        ("RAGMON_OTLP_NESTED", "own", "otlp_nested", "own"),
        ("RAGMON_OTLP_HOLD_S", "2.5", "otlp_hold_s", 2.5),
        (
            "RAGMON_OTLP_EXPORT_ENDPOINT",
            "http://c:4318/v1/logs",
            "otlp_export_endpoint",
            "http://c:4318/v1/logs",
        ),
        ("RAGMON_OTLP_EXPORT_MEASURES", "ndcg, hit,ndcg", "otlp_export_measures", ("ndcg", "hit")),
    ],
)
def test_each_variable_is_parsed(variable: str, raw: str, attribute: str, expected: object) -> None:
    assert getattr(load({variable: raw}), attribute) == expected


def test_every_variable_has_a_parse_case() -> None:
    covered = {case[0] for case in test_each_variable_is_parsed.pytestmark[0].args[1]}
    # RAGMON_PRICES and the *_FILE variables have their own tests.
    own = {"RAGMON_PRICES", "RAGMON_API_KEYS_FILE", "RAGMON_TEXT_KEYS_FILE"}
    assert covered >= set(env_variables()) - own


def test_a_fixed_rate_and_planned_sampling_exclude_each_other() -> None:
    with pytest.raises(SettingsError, match="RAGMON_SAMPLE_RATE.*RAGMON_SAMPLING=planned"):
        load({"RAGMON_SAMPLING": "planned", "RAGMON_SAMPLE_RATE": "0.5"})
    assert load({"RAGMON_SAMPLING": "planned"}).sample_rate == 1.0


def test_prices_merge_with_the_defaults() -> None:
    s = load({"RAGMON_PRICES": '{"my-model": [1, 2.5], "gpt-4o": [3, 12]}'})
    assert s.prices["my-model"] == (1.0, 2.5)
    assert s.prices["gpt-4o"] == (3.0, 12.0)
    assert s.prices["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]


def test_api_keys_file_adds_to_the_api_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# mounted secret\n{KEY}a:shop\n\n{KEY}b  # ops\n")
    s = load({"RAGMON_API_KEYS": KEY, "RAGMON_API_KEYS_FILE": str(keys)})
    assert s.api_keys == (KEY, f"{KEY}a:shop", f"{KEY}b")
    assert s.api_keys_file == str(keys)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read"),
        ("# no keys here\n", "holds no keys"),
        ("short\n", "at least 16 characters"),
    ],
)
def test_bad_api_keys_file_names_the_variable(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    keys = tmp_path / "keys"
    if content is not None:
        keys.write_text(content)
    with pytest.raises(SettingsError, match=rf"^RAGMON_API_KEYS_FILE: .*{reason}"):
        load({"RAGMON_API_KEYS_FILE": str(keys)})


def test_api_key_bound_to_an_empty_app_is_refused() -> None:
    with pytest.raises(SettingsError, match=r"^RAGMON_API_KEYS: the app after ':'"):
        load({"RAGMON_API_KEYS": f"{KEY}:"})


def test_judge_configured_with_a_key_or_a_base_url() -> None:
    assert load({"OPENAI_API_KEY": "sk-x"}).judge_configured
    assert load({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).judge_configured


def test_settings_build_valid_measure_params() -> None:
    s = load(
        {
            "RAGMON_RELEVANT_GRADE": "1",
            "RAGMON_T_ALPHA": "0",
            "RAGMON_F_ALPHA": "1",
            "RAGMON_NDCG_GAIN": "linear",
            "RAGMON_HARM_GRADES": "0,1,2,3",
        }
    )
    p = MeasureParams(
        relevant_grade=s.relevant_grade,
        t_alpha=s.t_alpha,
        f_alpha=s.f_alpha,
        ndcg_gain=s.ndcg_gain,
        harm_grades=s.harm_grades,
    )
    assert p.harm_grades == frozenset({0, 1, 2, 3})


@pytest.mark.parametrize(
    ("variable", "raw", "reason"),
    [
        ("REDIS_URL", "localhost:6379", "must be a URL starting with redis://"),
        ("REDIS_URL", "http://localhost:6379", "must be a URL starting with redis://"),
        ("RAGMON_API_KEYS", "short", "at least 16 characters"),
        ("RAGMON_METRICS_API_KEYS", f"{KEY},tiny:app", "at least 16 characters"),
        ("RAGMON_JUDGE", "claude", "must be one of openai, lexical"),
        ("OPENAI_BASE_URL", "127.0.0.1:8000", "must be a URL starting with http:// or https://"),
        ("RAGMON_JUDGE_MODE", "pairwise", "must be one of pointwise, listwise"),
        ("RAGMON_JUDGE_CONCURRENCY", "0", r"must be in \[1, 1024\]"),
        ("RAGMON_JUDGE_RPM", "-1", r"must be in \[0, inf\]"),
        ("RAGMON_JUDGE_TPM", "lots", "must be an integer"),
        ("RAGMON_JUDGE_TIMEOUT", "0", r"must be in \[0\.1, 600\]"),
        ("RAGMON_JUDGE_MAX_RETRIES", "2.5", "must be an integer"),
        ("RAGMON_PRICES", "gpt: 1", "must be JSON like"),
        ("RAGMON_PRICES", '{"m": [1]}', "must be JSON like"),
        ("RAGMON_PRICES", '["m", 1, 2]', "must be JSON like"),
        ("RAGMON_PRICES", '{"m": [-1, 2]}', "prices of 'm' must be finite numbers >= 0"),
        ("RAGMON_SAMPLE_RATE", "1.5", r"must be in \[0\.0, 1\.0\]"),
        ("RAGMON_SAMPLE_RATE", "nan", "must be a finite number"),
        ("RAGMON_SAMPLE_RATE", "half", "must be a number"),
        ("RAGMON_DAILY_BUDGET_USD", "-5", r"must be in \[0\.0, inf\]"),
        ("RAGMON_DAILY_BUDGET_USD", "inf", "must be a finite number"),
        ("RAGMON_SAMPLING", "adaptive", "must be one of fixed, planned"),
        ("RAGMON_TARGET_HALF_WIDTH", "-0.1", r"must be in \[0\.0, 1\.0\]"),
        ("RAGMON_MIN_JUDGED_PER_DAY", "2.5", "must be an integer"),
        ("RAGMON_RELEVANT_GRADE", "0", r"must be in \[1, 3\]"),
        ("RAGMON_RELEVANT_GRADE", "4", r"must be in \[1, 3\]"),
        ("RAGMON_RELEVANT_GRADE", "2.0", "must be an integer"),
        ("RAGMON_T_ALPHA", "-0.1", r"must be in \[0\.0, 1\.0\]"),
        ("RAGMON_T_ALPHA", "NaN", "must be a finite number"),
        ("RAGMON_F_ALPHA", "1.01", r"must be in \[0\.0, 1\.0\]"),
        ("RAGMON_NDCG_GAIN", "log", "must be one of exponential, linear"),
        ("RAGMON_HARM_GRADES", "4", "grades 0-3"),
        ("RAGMON_HARM_GRADES", "one", "grades 0-3"),
        ("RAGMON_HARM_GRADES", ",", "grades 0-3"),
        ("RAGMON_MAX_SERIES", "0", r"must be in \[1, 100000\]"),
        ("RAGMON_RESULT_TTL_DAYS", "0", r"must be in \[0\.01, 3650\]"),
        ("RAGMON_IDEMPOTENCY_S", "5", r"must be in \[60, 2592000\]"),
        ("RAGMON_MEMORY_HIGH", "1.5", r"must be in \[0\.1, 1\.0\]"),
        ("RAGMON_CACHE_TTL_DAYS", "-1", r"must be in \[0\.0, 3650\]"),
        ("RAGMON_APP_DAILY_BUDGET_USD", "a=-1", "must be USD"),
        ("RAGMON_APP_DAILY_BUDGET_USD", "a=1,a=2", "must be USD"),
        ("RAGMON_STORE_TEXT", "maybe", "must be true or false"),
        ("RAGMON_TEXT_KEYS", "short", "must be a Fernet key"),
        ("RAGMON_UTILITY", "sometimes", "must be true or false"),
        ("RAGMON_JUDGE_SCALE", "1-10", "must be one of umbrela, utility5"),
        ("RAGMON_QUEUE_LIMIT", "0", r"must be in \[1, inf\]"),
        ("RAGMON_MAX_BODY_BYTES", "100", r"must be in \[1024, inf\]"),
        ("RAGMON_JOB_BATCH_SIZE", "1001", r"must be in \[1, 1000\]"),
        ("RAGMON_ANCHOR_FILE", "/no/such/golden.jsonl", "no such file: /no/such/golden.jsonl"),
        ("RAGMON_ANCHOR_SIZE", "10", r"must be in \[30, 10000\]"),
        ("RAGMON_ANCHOR_EVERY_HOURS", "48", r"must be in \[1, 24\]"),
        ("RAGMON_SECOND_JUDGE_RATE", "2", r"must be in \[0\.0, 1\.0\]"),
        ("RAGMON_REPORT_WEBHOOK", "hooks.example/x", "must be a URL starting with http://"),
        ("RAGMON_EXPLORER_URL", "ragmon.example.com", "must be a URL starting with http://"),
        ("RAGMON_REPORT_KEEP", "0", r"must be in \[1, 1000\]"),
        ("RAGMON_ALERT_MARGIN_NDCG", "1.5", r"must be in \[0.0, 1.0\]"),
        ("RAGMON_ALERT_Z", "-1", r"must be in \[0.0, 20.0\]"),
        ("RAGMON_ALERT_MIN_EVENTS", "0", r"must be in \[1, inf\]"),
        ("RAGMON_OTLP_APP_ATTRIBUTES", "service.name,,x", "comma-separated attribute names"),
        ("RAGMON_OTLP_K_ATTRIBUTES", "rag k", "comma-separated attribute names"),
        ("RAGMON_OTLP_K", "bot=0", "for every app, or app=k pairs"),
        ("RAGMON_OTLP_K", "bot=5,bot=6", "for every app, or app=k pairs"),
        ("RAGMON_OTLP_K", "bad app=5", "for every app, or app=k pairs"),
        ("RAGMON_APP_SHARES", "big=0", "must be app=share pairs"),
        ("RAGMON_APP_SHARES", "3", "must be app=share pairs"),
        ("RAGMON_OTLP_NESTED", "twice", "one of skip, own"),
        ("RAGMON_OTLP_EXPORT_ENDPOINT", "collector:4318", "must be a URL starting with http://"),
        ("RAGMON_OTLP_EXPORT_MEASURES", "ndcg,mrr", "unknown measure 'mrr': use some of t,ndcg"),
        ("RAGMON_ALLOWED_HOSTS", "evil.example/x", "is not a host name"),
    ],
)
def test_bad_value_raises_settings_error_naming_the_variable(
    variable: str, raw: str, reason: str
) -> None:
    with pytest.raises(SettingsError, match=reason) as info:
        load({variable: raw})
    assert str(info.value).startswith(variable)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("RAGMON_API_KEYS", "s3cret-but"),
        ("RAGMON_METRICS_API_KEYS", "leaky:app"),
        ("REDIS_URL", "rediz://:hunter2@db:6379"),
        ("RAGMON_REPORT_WEBHOOK", "hooks.slack.com/services/T000/B000/XXXX"),
    ],
)
def test_secret_values_are_not_echoed(variable: str, raw: str) -> None:
    with pytest.raises(SettingsError) as info:
        load({variable: raw})
    assert str(info.value).startswith(f"{variable}:")
    assert raw not in str(info.value)


def test_non_secret_bad_value_is_echoed() -> None:
    with pytest.raises(SettingsError, match=r"^RAGMON_SAMPLE_RATE='2': must be in"):
        load({"RAGMON_SAMPLE_RATE": "2"})


@pytest.mark.parametrize(
    ("variable", "default"),
    [("RAGMON_JUDGE_MODEL", "gpt-4o-mini"), ("RAGMON_SAMPLE_RATE", "1.0"),
     ("RAGMON_JUDGE", "openai"), ("RAGMON_HARM_GRADES", "1"), ("RAGMON_QUEUE", "ragmon")],
)  # fmt: skip
def test_an_empty_value_that_cannot_mean_anything_is_refused(variable: str, default: str) -> None:
    with pytest.raises(SettingsError) as info:
        load({variable: "  "})
    assert (
        str(info.value) == f"{variable} is empty: give it a value or unset it (default {default})"
    )


def test_an_empty_value_means_none_where_none_is_the_default() -> None:
    empty = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGMON_API_KEYS", "RAGMON_EXPLORER_URL",
             "REDIS_URL", "RAGMON_TEXT_KEYS", "RAGMON_METRICS_API_KEYS")  # fmt: skip
    assert load(dict.fromkeys(empty, "")) == Settings()


def test_unknown_ragmon_variables_are_named_with_the_closest_known_one() -> None:
    env = {"RAGMON_SAMPLE_RAT": "0.1", "RAGMON_JUDGE_MODELL": "x", "RAGMON_ZZZ": "1",
           "RAGMON_SAMPLE_RATE": "0.5", "RAGMON_URL": "http://x", "PATH": "/bin"}  # fmt: skip
    assert unknown_variables(env, env_variables()) == (
        "unknown variables ignored: RAGMON_JUDGE_MODELL (did you mean RAGMON_JUDGE_MODEL?), "
        "RAGMON_SAMPLE_RAT (did you mean RAGMON_SAMPLE_RATE?), RAGMON_ZZZ"
    )
    assert (
        unknown_variables({"RAGMON_SAMPLE_RATE": "0.5", "HOME": "/root"}, env_variables()) is None
    )


def test_unrelated_variables_are_ignored() -> None:
    assert load({"PATH": "/bin", "HOME": "/root"}) == Settings()


# --- .env files ---------------------------------------------------------------------------


def test_dotenv_file_sets_values(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "# ragmon configuration\n"
        "\n"
        "REDIS_URL=redis://127.0.0.1:6390/1\n"
        "export RAGMON_JUDGE=lexical\n"
        'RAGMON_JUDGE_MODEL="gpt-4.1-mini"\n'
        "RAGMON_REPORT_DIR='/srv/reports # not a comment'\n"
        "RAGMON_SAMPLE_RATE = 0.5   # half of the traffic\n"
        "RAGMON_HARM_GRADES=0,1\n"
        "not a line\n"
    )
    s = load({}, dotenv)
    assert s.redis_url == "redis://127.0.0.1:6390/1"
    assert s.judge == "lexical"
    assert s.judge_model == "gpt-4.1-mini"
    assert s.report_dir == "/srv/reports # not a comment"
    assert s.sample_rate == 0.5
    assert s.harm_grades == frozenset({0, 1})


def test_environment_overrides_dotenv(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("RAGMON_MAX_SERIES=10\nRAGMON_T_ALPHA=0.9\n")
    s = load({"RAGMON_MAX_SERIES": "20"}, dotenv)
    assert s.max_series == 20  # from the environment
    assert s.t_alpha == 0.9  # from the file


def test_bad_value_in_dotenv_names_the_variable(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("RAGMON_NDCG_GAIN=cubic\n")
    with pytest.raises(SettingsError, match=r"^RAGMON_NDCG_GAIN='cubic': must be one of"):
        load({}, dotenv)


def test_missing_dotenv_is_fine(tmp_path: Path) -> None:
    assert load({}, tmp_path / "absent.env") == Settings()
    assert read_dotenv(tmp_path / "absent.env") == {}


def test_dotenv_none_reads_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("RAGMON_MAX_SERIES=10\n")
    monkeypatch.chdir(tmp_path)
    assert load({}, None).max_series == 500
    assert Settings.from_env({}).max_series == 10  # default dotenv=".env" in the cwd


def test_read_dotenv_quotes_and_comments(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "A=plain\n"
        "B='single quoted'  # trailing comment\n"
        'C="a=b#c"\n'
        "D=x#y\n"
        "E=\n"
        "  export F = spaced  \n"
    )
    assert read_dotenv(dotenv) == {
        "A": "plain",
        "B": "single quoted",
        "C": "a=b#c",
        "D": "x#y",
        "E": "",
        "F": "spaced",
    }


def test_text_keys_file_adds_keys_after_the_variables(tmp_path: Path) -> None:
    first, second = "A" * 43 + "=", "B" * 43 + "="
    path = tmp_path / "text.keys"
    path.write_text(f"# the old key, still opening what it sealed\n{second}\n")
    s = load({"RAGMON_TEXT_KEYS": first, "RAGMON_TEXT_KEYS_FILE": str(path)})
    assert s.text_keys == (first, second)
    path.write_text("# none\n")
    with pytest.raises(SettingsError, match="RAGMON_TEXT_KEYS_FILE: .* holds no keys"):
        load({"RAGMON_TEXT_KEYS_FILE": str(path)})


def test_a_sentinel_url_names_its_parts() -> None:
    from ragmon.core.redis_address import parse_sentinel

    a = parse_sentinel("rediss+sentinel://:p%40ss@s1:26380,[::1]/main/2")
    assert a.sentinels == (("s1", 26380), ("::1", 26379)) and a.service == "main"
    assert a.db == 2 and a.password == "p@ss" and a.ssl
