"""Judges grade passages 0-3 for a query; see `base.Judge`."""

from workers.judges.base import Judge, JudgeError

__all__ = ["Judge", "JudgeError"]
