"""Schemathesis against the real server: a few hundred generated requests, zero 5xx.

The documented longer run: `python -m tests.reliability.fuzz --examples 1000`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.reliability.fuzz import fuzz, schemathesis_bin


@pytest.mark.slow
def test_no_5xx_from_generated_requests():
    if not Path(schemathesis_bin()).exists() and not shutil.which("schemathesis"):
        pytest.skip("schemathesis is not installed (pip install schemathesis)")
    result = fuzz(examples=40)
    print(result.summary())
    assert result.requests >= 300, result.output[-3000:]
    assert result.server_errors == 0, result.output[-3000:]
    assert result.returncode == 0, result.output[-3000:]
    # the generator reached the handlers, not only the auth and validation layers
    assert result.statuses[202] + result.statuses[200] > 0, result.statuses
