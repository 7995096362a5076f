"""The metrics of Redis' memory and the sampling mode (docs/metrics.md): what the ledger counts
per app and class, its steady-state forecast, and Redis' own figures."""

from __future__ import annotations

from ragmon.core.metric import Metric

# What Redis holds and will hold (docs/reliability.md "What is stored where"): the ledger every
# writer charges, its forecast of the steady state at today's rates and windows, beside
# Redis' own figures.
MEMORY: tuple[Metric, ...] = (
    Metric(
        "ragmon_sampling_mode",
        "gauge",
        "1 for the sampling mode in use (RAGMON_SAMPLING): planned or fixed.",
        ("mode",),
    ),
    Metric(
        "ragmon_sampling_fixed_rate",
        "gauge",
        "RAGMON_SAMPLE_RATE when RAGMON_SAMPLING=fixed (absent when planned).",
    ),
    Metric(
        "ragmon_memory_held_bytes",
        "gauge",
        "Bytes each app holds in Redis by class (idem: events not judged, within "
        "RAGMON_IDEMPOTENCY_S; texts; record; grades; anchors; sampling; pace; estimates; "
        "hold), from the ledger every writer charges.",
        ("app", "class"),
    ),
    Metric(
        "ragmon_memory_forecast_bytes",
        "gauge",
        "Bytes each app will hold in Redis once every retention window is full at the last "
        "day's rates (the ledger's forecast).",
        ("app",),
    ),
    Metric(
        "ragmon_memory_forecast_total_bytes",
        "gauge",
        "Redis' memory at steady state: what it uses now, plus what the apps' forecasts add "
        "to what they hold (compare with ragmon_redis_maxmemory_bytes).",
    ),
    Metric("ragmon_redis_used_memory_bytes", "gauge", "Redis' used_memory."),
    Metric(
        "ragmon_redis_maxmemory_bytes",
        "gauge",
        "Redis' maxmemory (0: none); past RAGMON_MEMORY_HIGH of it the apps holding most get 507.",
    ),
    Metric(
        "ragmon_redis_evicting",
        "gauge",
        "1 when Redis' maxmemory-policy may drop ragmon's keys at maxmemory (accepted events "
        "lost): set noeviction.",
    ),
)
