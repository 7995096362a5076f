"""Which days a report covers: the current window and its baseline (pure date arithmetic)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True)
class Window:
    """Inclusive range of UTC days."""

    start: date
    end: date

    @property
    def days(self) -> list[str]:
        n = (self.end - self.start).days + 1
        return [(self.start + timedelta(days=i)).isoformat() for i in range(n)]

    @property
    def label(self) -> str:
        """`2026-W47` when the window is exactly one ISO week, else `START..END`."""
        y, w, wd = self.start.isocalendar()
        if wd == 1 and (self.end - self.start).days == 6:
            return f"{y}-W{w:02d}"
        return f"{self.start.isoformat()}..{self.end.isoformat()}"

    def shifted(self, weeks: int) -> Window:
        delta = timedelta(weeks=weeks)
        return Window(self.start + delta, self.end + delta)


def parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a date (YYYY-MM-DD): {text!r}") from None


def iso_week(text: str) -> Window:
    """`2026-W47` → Monday..Sunday of that ISO week."""
    m = _WEEK.match(text.strip())
    if not m:
        raise ValueError(f"not an ISO week (YYYY-Www): {text!r}")
    try:
        monday = date.fromisocalendar(int(m[1]), int(m[2]), 1)
        return Window(monday, monday + timedelta(days=6))
    except (ValueError, OverflowError):  # 9999-W52 ends in the year 10000
        raise ValueError(f"no such ISO week: {text!r}") from None


def windows(
    end: str | None = None,
    days: int = 7,
    week: str | None = None,
    baseline: str = "previous",
    today: date | None = None,
) -> tuple[Window, Window]:
    """The current window and the baseline window from the command line's options."""
    if week:
        current = iso_week(week)
    else:
        if days < 1:
            raise ValueError("--days must be at least 1")
        last = parse_day(end) if end else (today or datetime.now(UTC).date())
        current = Window(last - timedelta(days=days - 1), last)
    n = (current.end - current.start).days + 1
    if baseline in ("", "previous"):
        base = Window(current.start - timedelta(days=n), current.start - timedelta(days=1))
    else:
        lo, sep, hi = baseline.partition("..")
        if not sep:
            raise ValueError(f"--baseline must be 'previous' or DATE..DATE, got {baseline!r}")
        base = Window(parse_day(lo), parse_day(hi))
        if base.end < base.start:
            raise ValueError(f"--baseline ends before it starts: {baseline!r}")
    return current, base
