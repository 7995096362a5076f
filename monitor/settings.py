"""One validated settings object, read from the environment (and an optional `.env` file).

Every process (API, worker, demo, report) builds a `Settings` once at start-up with
`Settings.from_env()` and passes it down. A bad value raises `SettingsError` naming the
variable, so the process stops before it serves anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from ragmon import setting_values as values
from ragmon.core.measures import MeasureParams
from ragmon.core.redis_address import SENTINEL_SCHEMES
from ragmon.environment import read_env
from ragmon.setting_values import (
    DEFAULT_PRICES,
    SettingsError,
    read_keys_file,
    read_text_keys_file,
)

DEFAULT_JUDGE_MODEL = "gpt-4o-mini"


@dataclass(frozen=True)
class Settings:
    """Everything configurable; field metadata maps each field to its environment variable.

    A field marked `secret` (keys, URLs that may embed a password or a token) is never echoed
    in an error message. Every field's variable is documented in docs/configuration.md, one
    row with the default and what it does: tests/test_docs.py fails until a new field has its
    row (and when a row's default differs from the field's).
    """

    redis_url: str | None = field(
        default=None,
        metadata={
            "env": "REDIS_URL",
            "parse": values.url("redis", "rediss", "unix", *SENTINEL_SCHEMES),
            "secret": True,
        },
    )
    api_keys: tuple[str, ...] = field(
        default=(), metadata={"env": "RAGMON_API_KEYS", "parse": values.api_keys, "secret": True}
    )
    metrics_api_keys: tuple[str, ...] = field(
        default=(),
        metadata={"env": "RAGMON_METRICS_API_KEYS", "parse": values.api_keys, "secret": True},
    )
    # Without RAGMON_API_KEYS, the names (beside localhost and IP addresses) a request's Host
    # and Origin may carry: a page of another site resolving its name to ragmon's address
    # (DNS rebinding) is refused (`ragmon.api.hosts`).
    allowed_hosts: tuple[str, ...] = field(
        default=(), metadata={"env": "RAGMON_ALLOWED_HOSTS", "parse": values.host_names}
    )
    api_keys_file: str | None = field(
        default=None, metadata={"env": "RAGMON_API_KEYS_FILE", "parse": values.text}
    )
    judge: str = field(
        default="openai",
        metadata={"env": "RAGMON_JUDGE", "parse": values.choice("openai", "lexical")},
    )
    openai_api_key: str | None = field(
        default=None, metadata={"env": "OPENAI_API_KEY", "parse": values.text, "secret": True}
    )
    openai_base_url: str | None = field(
        default=None, metadata={"env": "OPENAI_BASE_URL", "parse": values.url("http", "https")}
    )
    judge_model: str = field(
        default=DEFAULT_JUDGE_MODEL, metadata={"env": "RAGMON_JUDGE_MODEL", "parse": str.strip}
    )
    judge_mode: str = field(
        default="pointwise",
        metadata={"env": "RAGMON_JUDGE_MODE", "parse": values.choice("pointwise", "listwise")},
    )
    judge_scale: str = field(
        default="umbrela",
        metadata={"env": "RAGMON_JUDGE_SCALE", "parse": values.choice("umbrela", "utility5")},
    )
    judge_concurrency: int = field(
        default=128,
        metadata={"env": "RAGMON_JUDGE_CONCURRENCY", "parse": values.number(1, 1024, int)},
    )
    judge_rpm: int = field(
        default=0, metadata={"env": "RAGMON_JUDGE_RPM", "parse": values.number(0, None, int)}
    )
    judge_tpm: int = field(
        default=0, metadata={"env": "RAGMON_JUDGE_TPM", "parse": values.number(0, None, int)}
    )
    judge_timeout_s: float = field(
        default=30.0, metadata={"env": "RAGMON_JUDGE_TIMEOUT", "parse": values.number(0.1, 600)}
    )
    judge_max_retries: int = field(
        default=6, metadata={"env": "RAGMON_JUDGE_MAX_RETRIES", "parse": values.number(0, 100, int)}
    )
    utility: bool = field(
        default=False, metadata={"env": "RAGMON_UTILITY", "parse": values.boolean}
    )
    prices: dict[str, tuple[float, float]] = field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        metadata={"env": "RAGMON_PRICES", "parse": values.prices},
    )
    sample_rate: float = field(
        default=1.0, metadata={"env": "RAGMON_SAMPLE_RATE", "parse": values.number(0.0, 1.0)}
    )
    daily_budget_usd: float = field(
        default=0.0, metadata={"env": "RAGMON_DAILY_BUDGET_USD", "parse": values.number(0.0)}
    )
    sampling: str = field(
        default="planned",
        metadata={"env": "RAGMON_SAMPLING", "parse": values.choice("fixed", "planned")},
    )
    target_half_width: float = field(
        default=0.03,
        metadata={"env": "RAGMON_TARGET_HALF_WIDTH", "parse": values.number(0.0, 1.0)},
    )
    min_judged_per_day: int = field(
        default=100,
        metadata={"env": "RAGMON_MIN_JUDGED_PER_DAY", "parse": values.number(0, None, int)},
    )
    # Each app's own daily judge budget (`5`, or `support-bot=10,search=2` with a bare number
    # for the apps not named; 0: none), within RAGMON_DAILY_BUDGET_USD's for the fleet.
    app_daily_budget_usd: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "env": "RAGMON_APP_DAILY_BUDGET_USD",
            "parse": values.per_app("USD (≥ 0)", "support-bot=10,search=2", 0.0),
        },
    )
    relevant_grade: int = field(
        default=2, metadata={"env": "RAGMON_RELEVANT_GRADE", "parse": values.number(1, 3, int)}
    )
    t_alpha: float = field(
        default=0.5, metadata={"env": "RAGMON_T_ALPHA", "parse": values.number(0.0, 1.0)}
    )
    f_alpha: float = field(
        default=0.5, metadata={"env": "RAGMON_F_ALPHA", "parse": values.number(0.0, 1.0)}
    )
    ndcg_gain: str = field(
        default="exponential",
        metadata={"env": "RAGMON_NDCG_GAIN", "parse": values.choice("exponential", "linear")},
    )
    harm_grades: frozenset[int] = field(
        default=frozenset({1}), metadata={"env": "RAGMON_HARM_GRADES", "parse": values.grades}
    )
    max_series: int = field(
        default=500, metadata={"env": "RAGMON_MAX_SERIES", "parse": values.number(1, 100_000, int)}
    )
    max_series_per_app: int = field(
        default=100,
        metadata={"env": "RAGMON_MAX_SERIES_PER_APP", "parse": values.number(1, 100_000, int)},
    )
    series_idle_days: float = field(
        default=30.0, metadata={"env": "RAGMON_SERIES_IDLE_DAYS", "parse": values.number(0.0, 3650)}
    )
    result_ttl_days: float = field(
        default=35.0, metadata={"env": "RAGMON_RESULT_TTL_DAYS", "parse": values.number(0.01, 3650)}
    )
    text_ttl_days: float = field(
        default=8.0, metadata={"env": "RAGMON_TEXT_TTL_DAYS", "parse": values.number(0.0, 3650)}
    )
    idempotency_s: int = field(
        default=900,
        metadata={"env": "RAGMON_IDEMPOTENCY_S", "parse": values.number(60, 30 * 86400, int)},
    )
    cache_ttl_days: float = field(
        default=30.0, metadata={"env": "RAGMON_CACHE_TTL_DAYS", "parse": values.number(0.0, 3650)}
    )
    shared_cache: bool = field(
        default=False, metadata={"env": "RAGMON_SHARED_CACHE", "parse": values.boolean}
    )
    store_text: bool = field(
        default=True, metadata={"env": "RAGMON_STORE_TEXT", "parse": values.boolean}
    )
    text_keys: tuple[str, ...] = field(
        default=(), metadata={"env": "RAGMON_TEXT_KEYS", "parse": values.text_keys, "secret": True}
    )
    text_keys_file: str | None = field(
        default=None, metadata={"env": "RAGMON_TEXT_KEYS_FILE", "parse": values.text}
    )
    # Each app's share of Redis: MB of events it may hold (`500`, or `support-bot=2000,search=500`
    # with a bare number for the apps not named; 0: none). Past it, 507 naming app and limit.
    # Each app's room for people's grades and the texts they were given on (`50`, or
    # `support-bot=200,search=20`; 0: no limit of their own), within RAGMON_APP_STORAGE_MB.
    app_grades_mb: dict[str, float] = field(
        default_factory=lambda: {"*": 50.0},
        metadata={
            "env": "RAGMON_APP_GRADES_MB",
            "parse": values.per_app("MB (≥ 0)", "support-bot=200,search=20", 0.0),
        },
    )
    app_storage_mb: dict[str, float] = field(
        default_factory=dict,
        metadata={
            "env": "RAGMON_APP_STORAGE_MB",
            "parse": values.per_app("MB (≥ 0)", "support-bot=2000,search=500", 0.0),
        },
    )
    memory_high: float = field(
        default=0.9, metadata={"env": "RAGMON_MEMORY_HIGH", "parse": values.number(0.1, 1.0)}
    )
    queue_limit: int = field(
        default=100_000,
        metadata={"env": "RAGMON_QUEUE_LIMIT", "parse": values.number(1, None, int)},
    )
    max_body_bytes: int = field(
        default=32 * 1024 * 1024,
        metadata={"env": "RAGMON_MAX_BODY_BYTES", "parse": values.number(1024, None, int)},
    )
    store_timeout_s: float = field(
        default=5.0, metadata={"env": "RAGMON_STORE_TIMEOUT_S", "parse": values.number(2.0, 600.0)}
    )
    wait_replicas: int = field(
        default=0, metadata={"env": "RAGMON_WAIT_REPLICAS", "parse": values.number(0, 16, int)}
    )
    wait_timeout_ms: int = field(
        default=1000,
        metadata={"env": "RAGMON_WAIT_TIMEOUT_MS", "parse": values.number(1, 60_000, int)},
    )
    header_timeout_s: float = field(
        default=10.0, metadata={"env": "RAGMON_HEADER_TIMEOUT_S", "parse": values.number(0.1, 3600)}
    )
    body_timeout_s: float = field(
        default=60.0, metadata={"env": "RAGMON_BODY_TIMEOUT_S", "parse": values.number(0.1, 3600)}
    )
    max_connections: int = field(
        default=4096,
        metadata={"env": "RAGMON_MAX_CONNECTIONS", "parse": values.number(10, 1_000_000, int)},
    )
    metrics_refresh_s: float = field(
        default=10.0,
        metadata={"env": "RAGMON_METRICS_REFRESH_S", "parse": values.number(0.0, 3600)},
    )
    metrics_process: bool = field(
        default=True, metadata={"env": "RAGMON_METRICS_PROCESS", "parse": values.boolean}
    )
    job_batch_size: int = field(
        default=32, metadata={"env": "RAGMON_JOB_BATCH_SIZE", "parse": values.number(1, 1000, int)}
    )
    #: Each app's share of the drain jobs' turns (`app=share,...`; 1 for an app not listed).
    app_shares: dict[str, float] = field(
        default_factory=dict, metadata={"env": "RAGMON_APP_SHARES", "parse": values.app_shares}
    )
    alert_margin_ndcg: float = field(
        default=0.03, metadata={"env": "RAGMON_ALERT_MARGIN_NDCG", "parse": values.number(0.0, 1.0)}
    )
    alert_margin_t: float = field(
        default=0.1, metadata={"env": "RAGMON_ALERT_MARGIN_T", "parse": values.number(0.0)}
    )
    alert_z: float = field(
        default=3.5, metadata={"env": "RAGMON_ALERT_Z", "parse": values.number(0.0, 20.0)}
    )
    alert_min_events: int = field(
        default=30,
        metadata={"env": "RAGMON_ALERT_MIN_EVENTS", "parse": values.number(1, None, int)},
    )
    explorer_url: str | None = field(
        default=None,
        metadata={"env": "RAGMON_EXPLORER_URL", "parse": values.url("http", "https")},
    )
    report_webhook: str | None = field(
        default=None,
        metadata={
            "env": "RAGMON_REPORT_WEBHOOK",
            "parse": values.url("http", "https"),
            "secret": True,
        },
    )
    report_keep: int = field(
        default=12, metadata={"env": "RAGMON_REPORT_KEEP", "parse": values.number(1, 1000, int)}
    )
    report_dir: str = field(
        default="reports", metadata={"env": "RAGMON_REPORT_DIR", "parse": str.strip}
    )
    # The judge against people and itself (docs/agreement.md).
    anchor_file: str | None = field(
        default=None, metadata={"env": "RAGMON_ANCHOR_FILE", "parse": values.readable_file}
    )
    anchor_size: int = field(
        default=200, metadata={"env": "RAGMON_ANCHOR_SIZE", "parse": values.number(30, 10_000, int)}
    )
    anchor_every_hours: int = field(
        default=24,
        metadata={"env": "RAGMON_ANCHOR_EVERY_HOURS", "parse": values.number(1, 24, int)},
    )
    second_judge_model: str | None = field(
        default=None, metadata={"env": "RAGMON_SECOND_JUDGE_MODEL", "parse": values.text}
    )
    second_judge_rate: float = field(
        default=0.05,
        metadata={"env": "RAGMON_SECOND_JUDGE_RATE", "parse": values.number(0.0, 1.0)},
    )
    queue_name: str = field(default="ragmon", metadata={"env": "RAGMON_QUEUE", "parse": str.strip})
    # OTLP (`POST /v1/traces`): the span or resource attributes each label and k are read from,
    # the first one present wins (docs/integration.md, "OpenTelemetry").
    otlp_app_attributes: tuple[str, ...] = field(
        default=("service.name", "openinference.project.name"),
        metadata={"env": "RAGMON_OTLP_APP_ATTRIBUTES", "parse": values.attribute_names},
    )
    otlp_index_attributes: tuple[str, ...] = field(
        default=("metadata.index", "gen_ai.data_source.id"),
        metadata={"env": "RAGMON_OTLP_INDEX_ATTRIBUTES", "parse": values.attribute_names},
    )
    otlp_retriever_attributes: tuple[str, ...] = field(
        default=("metadata.retriever", "span.name+metadata.ls_vector_store_provider"),
        metadata={"env": "RAGMON_OTLP_RETRIEVER_ATTRIBUTES", "parse": values.attribute_names},
    )
    otlp_segment_attributes: tuple[str, ...] = field(
        default=("metadata.segment",),
        metadata={"env": "RAGMON_OTLP_SEGMENT_ATTRIBUTES", "parse": values.attribute_names},
    )
    otlp_k_attributes: tuple[str, ...] = field(
        default=("metadata.k", "gen_ai.retrieval.top_k", "gen_ai.request.top_k"),
        metadata={"env": "RAGMON_OTLP_K_ATTRIBUTES", "parse": values.attribute_names},
    )
    # `k` where no attribute gives it: per app (`support-bot=5,search=10`; a bare number for
    # any other app). Without either, k is the number of documents, counted as a repair.
    otlp_k: dict[str, int] = field(
        default_factory=dict, metadata={"env": "RAGMON_OTLP_K", "parse": values.k_per_app}
    )
    # A retriever span under another retriever span: skipped, or an event under its own name.
    otlp_nested: str = field(
        default="skip",
        metadata={"env": "RAGMON_OTLP_NESTED", "parse": values.choice("skip", "own")},
    )
    # How long a retriever span whose parent is in another export waits for it (0: not at all).
    otlp_hold_s: float = field(
        default=15.0, metadata={"env": "RAGMON_OTLP_HOLD_S", "parse": values.number(0.0, 300.0)}
    )
    # Each judged event's measures sent to an OTLP/HTTP logs endpoint (`.../v1/logs`) as
    # `gen_ai.evaluation.result` events, one per measure listed (docs/integration.md).
    otlp_export_endpoint: str | None = field(
        default=None,
        metadata={"env": "RAGMON_OTLP_EXPORT_ENDPOINT", "parse": values.url("http", "https")},
    )
    otlp_export_measures: tuple[str, ...] = field(
        default=("ndcg",),
        metadata={"env": "RAGMON_OTLP_EXPORT_MEASURES", "parse": values.measure_names},
    )

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, dotenv: str | Path | None = ".env"
    ) -> Settings:
        """Read settings from `environ` (default `os.environ`), then `.env` for unset ones."""
        env = read_env(environ, dotenv)
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = f.metadata["env"]
            raw = env.get(name)
            if raw is None:
                continue
            if not raw.strip() and not _empty_means_unset(f):
                raise SettingsError(
                    f"{name} is empty: give it a value or unset it (default {_shown(f)})"
                )
            try:
                values[f.name] = f.metadata["parse"](raw)
            except ValueError as exc:
                shown = name if f.metadata.get("secret") else f"{name}={raw!r}"
                raise SettingsError(f"{shown}: {exc}") from None
        if values.get("api_keys_file"):  # its keys join RAGMON_API_KEYS'
            try:
                extra = read_keys_file(values["api_keys_file"])
            except ValueError as exc:
                raise SettingsError(f"RAGMON_API_KEYS_FILE: {exc}") from None
            values["api_keys"] = (*values.get("api_keys", ()), *extra)
        if values.get("text_keys_file"):  # its keys follow RAGMON_TEXT_KEYS'
            try:
                more = read_text_keys_file(values["text_keys_file"])
            except ValueError as exc:
                raise SettingsError(f"RAGMON_TEXT_KEYS_FILE: {exc}") from None
            values["text_keys"] = (*values.get("text_keys", ()), *more)
        if "sample_rate" in values and "RAGMON_SAMPLING" not in env:  # a rate set keeps its
            values["sampling"] = "fixed"  # meaning: the same for every series
        if values.get("sampling", "planned") == "planned" and values.get("sample_rate", 1.0) != 1.0:
            raise SettingsError(
                "RAGMON_SAMPLE_RATE is a fixed rate for every series; with "
                "RAGMON_SAMPLING=planned the plan sets each series' rate: unset one of them"
            )
        return cls(**values)

    def measure_params(self) -> MeasureParams:
        """The parameters of the measures (relevant grade, alphas, gain, harm grades)."""
        return MeasureParams(
            relevant_grade=self.relevant_grade,
            t_alpha=self.t_alpha,
            f_alpha=self.f_alpha,
            ndcg_gain=self.ndcg_gain,
            harm_grades=self.harm_grades,
        )

    def app_daily_budget(self, app: str) -> float:
        """`app`'s own daily judge budget in USD (0: none, only the fleet's)."""
        limits = self.app_daily_budget_usd
        return limits.get(app, limits.get("*", 0.0))

    @property
    def judge_configured(self) -> bool:
        """True when an OpenAI-compatible endpoint is configured (a key or a base URL)."""
        return bool(self.openai_api_key or self.openai_base_url)


def _empty_means_unset(f: Any) -> bool:
    """An empty value means "none" only where the default is none: an optional URL, file or
    key, or no keys. Anywhere else (`RAGMON_JUDGE_MODEL=`) it is a mistake, not the default."""
    return f.default is None or f.default == ()


def _shown(f: Any) -> str:
    default = f.default_factory() if f.default is MISSING else f.default
    if isinstance(default, frozenset):
        return ",".join(str(x) for x in sorted(default))
    if isinstance(default, tuple):
        return ",".join(default)
    return str(default) if not isinstance(default, dict) else "built in"


def env_variables() -> list[str]:
    """Every environment variable ragmon reads, in declaration order."""
    return [f.metadata["env"] for f in fields(Settings)]
