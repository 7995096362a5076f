"""Schemathesis against the real server: a few hundred generated requests, zero 5xx.

Every phase runs (examples, coverage, fuzzing, stateful); the coverage phase's boundary cases of
every operation come whatever `--max-examples` says, the fuzzing and stateful phases draw up to
that many per operation.

The documented longer run: `python -m tests.reliability.fuzz --examples 1000`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.reliability.fuzz import fuzz, schemathesis_bin

pytestmark = pytest.mark.slow


def test_no_5xx_from_generated_requests():
    if not Path(schemathesis_bin()).exists() and not shutil.which("schemathesis"):
        pytest.skip("schemathesis is not installed (pip install schemathesis)")
    result = fuzz(examples=20)
    print(result.summary())
    assert result.requests >= 300, result.output[-3000:]
    assert result.server_errors == 0, result.output[-3000:]
    assert result.returncode == 0, result.output[-3000:]
    # the generator reached the handlers, not only the auth and validation layers
    assert result.statuses[202] + result.statuses[200] > 0, result.statuses
