"""Who gave a grade: a judge identity (model, prompt version, mode), a person, or the app.

Every stored grade carries one of these names, agreement is computed per judge identity, and
the judgment cache is keyed by it: a new model, prompt or mode never reuses, nor mixes with,
another identity's grades.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KNOWN = "known"  # a grade the app sent with the event (`passages[].grade`)
HUMAN_PREFIX = "human:"  # a person's grade (`POST /v1/grades`): `human:<reviewer>`
REVIEWER_PATTERN = r"^[A-Za-z0-9_.@:+-]{1,64}$"
_REVIEWER = re.compile(REVIEWER_PATTERN)


@dataclass(frozen=True)
class JudgeIdentity:
    """A judge as far as its grades go: the same identity gives the same grade to the same
    (query, passage); any change of one part may change grades."""

    model: str
    prompt_version: str
    mode: str

    @property
    def label(self) -> str:
        """`model/prompt_version/mode`: the `judge` label of the agreement metrics, and what
        results and reports name."""
        return f"{self.model}/{self.prompt_version}/{self.mode}"

    @property
    def cache_version(self) -> str:
        """The judgment cache's namespace under the model: prompt version and mode (a key
        spelled `umbrela-1-pointwise` since before identities had a name)."""
        return f"{self.prompt_version}-{self.mode}"


def human(reviewer: str) -> str:
    """The name a person's grades carry."""
    return f"{HUMAN_PREFIX}{reviewer}"


def valid_reviewer(reviewer: str) -> bool:
    """A reviewer name: 1-64 letters, digits or `_.@:+-` (an e-mail address fits)."""
    return bool(_REVIEWER.fullmatch(reviewer))
