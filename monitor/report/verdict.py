"""One verdict per retriever: its measures read together, so a collapse is never an improvement.

Measures of one retriever can move in opposite directions for one cause. The case that matters:
Harm@K counts the near misses (on-topic passages that do not answer) in the top K; when a
retriever collapses, its near misses become off-topic passages (grade 0), so Harm@K falls
while every relevance measure falls with it. Read alone, that fall is an "improvement"; read
with the others, it is part of the collapse. The rules, in order:

1. any measure regressed: the verdict is **regression**; whatever moved the good way beside it
   is shown with the reason it is not an improvement;
2. otherwise, a fall of Harm@K counts as an improvement only when the relevance measures did not
   fall with it (P@K, nDCG@K and Hit@K each unchanged or up, by their point estimates): the near
   misses became answers, not off-topic passages; when they did fall, the verdict is **mixed**;
3. otherwise any improvement makes the verdict **improvement**; a retriever whose measures
   were tested and did not move is **unchanged**; else the reason it was not judged (too few
   events to tell, no baseline yet, no data).

Beside the verdict on change, a verdict on level: a retriever poor from its first day has no
change to show, so this week's interval wholly past a measure's line (`Measure.line`, the level
alerts' lines) says **poor level**, with or without a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragmon.core.measure_table import BY_KEY
from ragmon.report.compare import LOWER_IS_BETTER, NAMES, Group, Row
from ragmon.report.ops import OpsRow

# The measures whose fall says the top K holds fewer answers (what Harm@K's fall is read with).
RELEVANCE = ("precision", "ndcg", "hit")


@dataclass
class Verdict:
    """A retriever's one verdict, the rows behind it, and the moves read as not improvements."""

    group: Group
    verdict: str  # regression | improvement | mixed | unchanged | too few events to tell |
    # no baseline yet | no data
    regressed: list[Row] = field(default_factory=list)
    improved: list[Row] = field(default_factory=list)  # counted as improvements
    discounted: list[tuple[Row, str]] = field(default_factory=list)  # good-way moves, and why not
    level: str = ""  # "poor level: ..." when this week's interval is past a measure's line

    @property
    def why(self) -> str:
        """The verdict in a phrase: its biggest moves."""
        if self.regressed:
            return ", ".join(_move(r) for r in self.regressed[:3])
        if self.improved:
            return ", ".join(_move(r) for r in self.improved[:3])
        if self.discounted:
            return "; ".join(reason for _, reason in self.discounted[:2])
        return ""


def _move(row: Row) -> str:
    return f"{NAMES[row.measure]} {row.tested.estimate:+.3f}"


def _grade0(ops: OpsRow | None) -> str:
    """The share of off-topic passages (grade 0) in both windows, when the grades are known."""
    if ops is None or not sum(ops.base.grades) or not sum(ops.cur.grades):
        return ""
    b = ops.base.grades[0] / sum(ops.base.grades)
    c = ops.cur.grades[0] / sum(ops.cur.grades)
    return f" (off-topic passages, grade 0: {b:.0%} → {c:.0%} of the judged)"


def _harm_reason(row: Row, fell: list[Row], ops: OpsRow | None) -> str:
    names = ", ".join(NAMES[r.measure] for r in fell)
    return (
        f"{NAMES[row.measure]} {row.tested.estimate:+.3f} is not an improvement: {names} fell "
        f"with it, so its near misses became off-topic passages rather than answers" + _grade0(ops)
    )


def poor_level(rows: list[Row]) -> str:
    """ "poor level: Hit@K 0.307 [0.213, 0.401] below 0.6" when this week's interval of a
    measure with a line lies wholly past it; "" when none does."""
    poor = []
    for r in rows:
        cur = r.cur
        if cur is None or cur.high <= cur.low:
            continue  # no data, or an interval that cannot tell
        if past := BY_KEY[r.measure].past_line(cur.low, cur.high):
            poor.append(
                f"{NAMES[r.measure]} {cur.estimate:.3f} [{cur.low:.3f}, {cur.high:.3f}] {past}"
            )
    return "poor level: " + ", ".join(poor) if poor else ""


def _verdict(rows: list[Row], ops: OpsRow | None) -> Verdict:
    v = _change_verdict(rows, ops)
    v.level = poor_level(rows)
    return v


def _change_verdict(rows: list[Row], ops: OpsRow | None) -> Verdict:
    g = rows[0].group
    by = {r.measure: r for r in rows}
    regressed = [r for r in rows if r.status == "regression"]
    good = [r for r in rows if r.status == "improvement"]
    regressed.sort(key=lambda r: -abs(r.tested.effect))
    good.sort(key=lambda r: -abs(r.tested.effect))
    fell = [
        by[m] for m in RELEVANCE if m in by and by[m].change is not None and by[m].worse
    ]  # relevance measures pointing down, significant or not
    v = Verdict(g, "regression" if regressed else "", regressed)
    for r in good:
        if r.measure in LOWER_IS_BETTER and fell:
            v.discounted.append((r, _harm_reason(r, fell, ops)))
        elif regressed:
            head = regressed[0]
            v.discounted.append(
                (r, f"{_move(r)} moved the other way beside the regression of "
                 f"{NAMES[head.measure]}: the verdict is the regression")
            )  # fmt: skip
        else:
            v.improved.append(r)
    if v.verdict:
        return v
    if v.improved:
        v.verdict = "improvement"
    elif v.discounted:
        v.verdict = "mixed"
    elif any(r.change is not None for r in rows):
        v.verdict = "unchanged"
    else:
        v.verdict = rows[0].status
    return v


def verdicts(rows: list[Row], ops: dict[Group, OpsRow]) -> list[Verdict]:
    """One verdict per group with rows, in the rows' group order."""
    groups: dict[Group, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    return [_verdict(rs, ops.get(g)) for g, rs in groups.items()]
