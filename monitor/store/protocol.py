"""The protocol between Python and the Lua scripts: named KEYS and ARGV positions, and the
stored names both sides share.

A `Script` names its KEYS and ARGV positions once. The script reads them as `K.<name>` and
`A.<name>` (a generated header binds them), and a caller builds them with `Script.call` from
the same names, so no one counts positions. Named lists of scalars follow the named ARGV
positions, each as its length then its items, read as `L.<name>` (a Lua array of strings): Lua
parses no JSON. Variable-length tails follow; `KEYS_REST` and `ARGV_REST` are their first
indexes. The header also holds the stored names the
scripts share with Python (`ragmon.store.fields`, `SEP`): no name is spelled in Lua.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from ragmon.core.wire import SEP, Status
from ragmon.store.fields import Field, HourPart, Kind, Name, Part, Slot, SummaryField

# The tables of stored names in every script's header: Lua name -> enum of `fields`.
SHARED: dict[str, type[StrEnum]] = {
    "F": Field, "S": Status, "N": Name, "H": Part, "HOUR": HourPart, "SLOT": Slot,
    "OV": SummaryField, "LG": Kind,
}  # fmt: skip
_PLAIN = re.compile(r"[\w|{}.-]*")  # what a stored name may hold: quoted as is in Lua


def _quoted(text: str) -> str:
    if not _PLAIN.fullmatch(text):
        raise ValueError(f"not a plain stored name: {text!r}")
    return f"'{text}'"


def _table(name: str, entries: Iterable[tuple[str, str]]) -> str:
    return f"local {name} = {{" + ", ".join(f"{k} = {v}" for k, v in entries) + "}\n"


class Call(NamedTuple):
    """The KEYS and ARGV of one run of a script."""

    keys: list[str]
    args: list[Any]


@dataclass(frozen=True)
class Script:
    """A Lua script with its named KEYS and ARGV positions, and its named ARGV lists."""

    name: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    body: str
    lists: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """The Lua to register: the header, then the body."""
        header = [f"local SEP = {_quoted(SEP)}\n"]
        for table, names in SHARED.items():
            header.append(_table(table, ((n.name.lower(), _quoted(n.value)) for n in names)))
        header.append(_table("K", ((k, f"KEYS[{i}]") for i, k in enumerate(self.keys, 1))))
        header.append(_table("A", ((a, f"ARGV[{i}]") for i, a in enumerate(self.args, 1))))
        header.append(f"local KEYS_REST, ARGV_REST = {len(self.keys) + 1}, {len(self.args) + 1}\n")
        if self.lists:
            listed = ", ".join(_quoted(n) for n in self.lists)
            header.append(
                f"local L = {{}}\nfor _, name in ipairs({{{listed}}}) do\n"
                "  local items = {}\n"
                "  for j = 1, tonumber(ARGV[ARGV_REST]) do items[j] = ARGV[ARGV_REST + j] end\n"
                "  L[name], ARGV_REST = items, ARGV_REST + #items + 1\nend\n"
            )
        return "".join(header) + self.body

    def call(
        self,
        keys: Mapping[str, str],
        args: Mapping[str, Any],
        more_keys: Sequence[str] = (),
        more_args: Sequence[Any] = (),
        lists: Mapping[str, Sequence[Any]] | None = None,
    ) -> Call:
        """KEYS and ARGV from every named position and list (a missing or unknown name
        raises), then the tails."""
        lists = lists or {}
        if (
            set(keys) != set(self.keys)
            or set(args) != set(self.args)
            or set(lists) != set(self.lists)
        ):
            raise ValueError(
                f"{self.name}: KEYS {sorted(keys)}, ARGV {sorted(args)} and lists "
                f"{sorted(lists)} do not name {self.keys}, {self.args} and {self.lists}"
            )
        listed = [x for name in self.lists for x in (len(lists[name]), *lists[name])]
        return Call(
            [keys[k] for k in self.keys] + list(more_keys),
            [args[a] for a in self.args] + listed + list(more_args),
        )
