"""The optional second judge (RAGMON_SECOND_JUDGE_MODEL): on a sample of the judged events
(RAGMON_SECOND_JUDGE_RATE), another model on the same endpoint, prompt and mode grades the
passages the first judge graded. Its grades never enter the measures: they are kept beside the
first judge's, and their agreement is exported like people's (`ragmon.oversight`).

A failure of the second judge never touches the event: it is logged and the sample skips it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ragmon.store import text_hash
from ragmon.store.records import StoredEvent
from ragmon.workers.grading import CACHE, JUDGE, Graded, on_both_scales
from ragmon.workers.judges.accounting import paying
from ragmon.workers.judges.base import Judge, JudgeError

if TYPE_CHECKING:
    from ragmon.settings import Settings
    from ragmon.store import Store

log = logging.getLogger("ragmon.worker")


def chosen(event_id: str, rate: float) -> bool:
    """Whether the second judge grades this event: deterministic on the id (a retried job
    decides the same), independent of RAGMON_SAMPLE_RATE's draw."""
    return int(text_hash(f"second-judge|{event_id}")[:16], 16) / 2**64 < rate


async def second_opinion(
    settings: Settings, store: Store, event: StoredEvent, graded: Graded, first: Judge
) -> None:
    """Have the second judge grade what `first` graded of `event`, and keep both grades."""
    from ragmon.workers.judges.llm import OpenAIJudge

    model = settings.second_judge_model
    if (
        not model
        or settings.judge != "openai"
        or not chosen(event["event_id"], settings.second_judge_rate)
    ):
        return  # fmt: skip
    idx = [i for i, s in enumerate(graded.sources) if s in (JUDGE, CACHE)]
    if not idx:
        return
    second = OpenAIJudge(replace(settings, judge_model=model), store)
    passages = event["passages"]
    try:
        with paying(event["labels"]["app"]):  # the event's app pays, as for the first judge
            got = await second.grade(event["query"], [(passages[i]["id"], passages[i]["text"])
                                                      for i in idx])  # fmt: skip
    except JudgeError as exc:
        log.info("second judge skipped event %s: %s", event["event_id"], exc.reason)
        return
    except Exception:  # the event is stored: nothing of it may fail for the second judge
        log.warning("second judge failed on event %s", event["event_id"], exc_info=True)
        return
    finally:
        await second.aclose()
    mine = on_both_scales(list(got), second)[0]
    firsts = on_both_scales([graded.grades[i] for i in idx], first)[0]
    store.second_opinions.add(
        {
            "app": event["labels"]["app"],
            "event_id": event["event_id"],
            "first": first.identity.label,
            "second": second.identity.label,
            "pairs": [[f, s] for f, s in zip(firsts, mine, strict=True)
                      if f is not None and s is not None],
            "at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
    )  # fmt: skip
