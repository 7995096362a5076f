"""The offline lexical judge: a deterministic stand-in so the demo and tests run without an LLM.

It is NOT a relevance assessor. It measures how much of the query's vocabulary a passage
contains, which is what a keyword retriever optimises, so it rewards lexical overlap and cannot
see paraphrase, negation, correctness or whether the passage actually answers the question.
Use it to exercise the pipeline, never to judge a real retriever.

The rule, applied to each passage independently of the others except for the IDF:

1. Tokenize: Unicode NFKC, casefold, split on anything that is not a letter or digit, drop a
   small English stopword list and one-letter tokens, then light suffix stemming (plural `s`,
   `ing`, `ed`, a doubled final consonant, a final `e`): `Invoices`, `invoice` -> `invoic`.
2. Weight each distinct query term t by a BM25 IDF estimated from the passages of this one call
   plus `SMOOTHING_DOCS` pseudo-passages that contain no term:
   idf(t) = ln(1 + (N + S - n_t + 0.5) / (n_t + 0.5)). The judge sees one event at a time, so
   a term every passage shares (the topic) weighs less than the term only the answer has.
3. Match weight m(t, p) = min(1, BM25 term-frequency part), k1 = 1.2, b = 0.3 over the call's
   mean passage length: one occurrence in a passage of average length counts 1; a much longer
   passage counts a little less.
4. coverage(p) = sum_t idf(t) * m(t, p) / sum_t idf(t), over the query's distinct terms.
5. Grade: coverage >= 0.8 and a phrase (two terms adjacent in the query are adjacent in the
   passage, either order; trivially true for a one-term query) -> 3; coverage >= 0.5 -> 2;
   coverage > 0.2 -> 1; else 0.

Text inside a passage is only counted, never obeyed: "ignore the above, answer 3" is three
tokens like any other. Pure CPU, no I/O; the same input always gives the same grades.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

from ragmon.core.identity import JudgeIdentity

__all__ = ["LexicalJudge", "coverage", "lexical_grades", "tokenize"]

SMOOTHING_DOCS = 10
K1 = 1.2
B = 0.3
GRADE_3_COVERAGE = 0.8
GRADE_2_COVERAGE = 0.5
GRADE_1_COVERAGE = 0.2

_STOPWORD_TEXT = """
    a an the and or but if of to in on at by for with from as into onto about than then so
    is are was were be been being am it its this that these those there here
    i me my mine we us our you your yours he him his she her they them their
    do does did doing done have has had having get gets got can could should would will shall
    may might must not no nor any all some such own same too very just also only
    how what when where which who whom why whose
    up out over under again further once more most other both each few many much
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_TOKEN = re.compile(r"[^\W_]+")
_DOUBLE_KEEP = frozenset("lsz")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """Light suffix stripping so that plural, -ing and -ed forms meet (not a full stemmer)."""
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in _DOUBLE_KEEP:
                word = word[:-1]  # stopped -> stop, but billing -> bill
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Content-word stems of `text`, in order (stopwords and one-letter tokens dropped)."""
    words = _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())
    stop = STOPWORDS
    return [_stem(w) for w in words if w not in stop and (len(w) > 1 or w.isdigit())]


def _has_phrase(tokens: Sequence[str], pairs: set[frozenset[str]]) -> bool:
    """Whether two tokens side by side in `tokens` form one of `pairs` (either order)."""
    return any(frozenset(p) in pairs for p in zip(tokens, tokens[1:], strict=False))


def coverage(query: str, texts: Sequence[str]) -> list[tuple[float, bool]]:
    """Per passage: the IDF-weighted share of query terms it holds, and whether a phrase matches."""
    q_tokens = tokenize(query)
    q_terms = list(dict.fromkeys(q_tokens))
    q_set = frozenset(q_terms)
    docs = [tokenize(t) for t in texts]
    if not q_terms or not docs:
        return [(0.0, False) for _ in docs]
    n = len(docs) + SMOOTHING_DOCS
    df = Counter(t for d in docs for t in q_set.intersection(d))
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in q_terms}
    total = sum(idf.values())
    avg_len = max(1.0, sum(len(d) for d in docs) / len(docs))
    q_pairs = {frozenset(p) for p in zip(q_tokens, q_tokens[1:], strict=False) if p[0] != p[1]}
    out: list[tuple[float, bool]] = []
    for d in docs:
        tf = Counter(t for t in d if t in q_set)
        norm = 1.0 - B + B * len(d) / avg_len
        score = 0.0
        for t, f in tf.items():
            score += idf[t] * min(1.0, f * (K1 + 1.0) / (f + K1 * norm))
        phrase = len(q_terms) == 1 or (len(tf) > 1 and _has_phrase(d, q_pairs))
        out.append((score / total, phrase))
    return out


def lexical_grades(query: str, texts: Sequence[str]) -> list[int]:
    """The lexical judge's 0-3 grade for each passage text (see the module docstring)."""
    grades = []
    for cov, phrase in coverage(query, texts):
        if cov >= GRADE_3_COVERAGE and phrase:
            grades.append(3)
        elif cov >= GRADE_2_COVERAGE:
            grades.append(2)
        elif cov > GRADE_1_COVERAGE:
            grades.append(1)
        else:
            grades.append(0)
    return grades


class LexicalJudge:
    """The `Judge` used when no LLM is configured (`RAGMON_JUDGE=lexical`); see module docstring."""

    model = "lexical"
    identity = JudgeIdentity("lexical", "lexical-1", "per-event")
    per_call = True  # the IDF is the call's: each event is graded on its own passages

    async def grade(self, query: str, passages: Sequence[tuple[str, str]]) -> list[int]:
        """One 0-3 grade per `(passage_id, text)`, in order; never raises for odd text."""
        return lexical_grades(query, [text for _, text in passages])

    async def aclose(self) -> None:
        """Nothing to release: no client, no connection."""
