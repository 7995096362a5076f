"""Each attack of issue 33 against a real `ragmon serve` (`tests.reliability.attacks`): every
`/healthz` during it is answered, the API process grows by less than 200 MiB, the attack
gets the 4xx that names its limit (never a 500; slow bodies: their connections are closed to
make room), and the API's log holds no traceback (out of file descriptors included). The
latencies against a quiet baseline are `tests/bench/bench_attacks.py`'s."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from tests.reliability.attacks import ATTACKS, attacking, serve, watch

pytestmark = pytest.mark.slow

SECONDS = 6.0
EXPECTED = {  # the answers each attack must get (any other status fails the test)
    "otlp-gzip-bomb": {"413"},
    "otlp-json-spans": {"413"},
    "otlp-60k-retrievers": {"413"},
    "otlp-deep-json": {"400"},
    "batch-32mb": {"422"},
    "login-300mb": {"413"},
    "bad-searches": {"400"},
}
SLOW = {  # slow bodies: what a client may see of its connection (evicted: closed or reset)
    "slow-login-bodies": {"opened", "closed", "reset", "refused"},
    "slow-ingest-bodies-1024-fds": {"opened", "closed", "reset", "refused"},
}


@pytest.mark.slow  # a real server per attack, 6 s of attack each
@pytest.mark.parametrize("name", [*EXPECTED, *SLOW])
def test_the_api_answers_health_checks_through_each_attack(name: str, redis_url: str) -> None:
    log_path = Path(tempfile.mkdtemp(prefix="ragmon-attack-")) / "api.log"
    with log_path.open("w") as log:
        proc, url = serve(ATTACKS[name], redis_url, stdout=log, stderr=log)
    try:
        with attacking(name, url, SECONDS) as attack:
            seen = watch(url, proc.pid, SECONDS)
            answers = json.loads(attack.communicate(timeout=SECONDS + 300)[0])
    finally:
        proc.stop()
    grew = f"API +{seen.api_grew_mib:.0f} MiB (with children +{seen.tree_grew_mib:.0f})"
    print(
        f"\n{name}: /healthz {len(seen.answered)}/{len(seen.latencies)} answered; {grew}; {answers}"
    )
    assert seen.failed == 0 and seen.answered
    if name in SLOW:  # never an answer: each connection is closed to make room
        assert answers.get("opened") and set(answers) <= SLOW[name], answers
    else:
        assert set(answers) == EXPECTED[name] and sum(answers.values()) > 0, answers
    assert seen.api_grew_mib < 200
    assert "Traceback" not in log_path.read_text()
