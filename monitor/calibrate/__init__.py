"""`ragmon calibrate FILE`: how far the configured judge agrees with known grades.

Reads rankings that carry known grades (the TREC DL file of ../shared/data/trec-dl, or ragmon's
own JSONL events with `passages[].grade`), grades their top 2K passages with the judge ragmon
is configured to use, exactly as the workers would (each (query, passage) once, as with the
judgment cache), and prints:

- Cohen's kappa, binary at RAGMON_RELEVANT_GRADE and quadratic-weighted on 0-3, with the
  Landis & Koch reading, raw agreement and the judge's grade bias;
- the 4x4 confusion matrix (rows: known grade, columns: judge grade);
- each measure's mean per retriever under the known grades and under the judge's grades, and
  Kendall's tau-b between the two orders of the retrievers, twice: on the shared pool (only
  passages both sides graded: a passage the known grades never judged is a pool gap, not a
  judge error) with a 95% bootstrap interval over queries, and with every judge grade (what
  ragmon reports in production).

Agreement uses only passages that have a known grade; for the measures with known grades a
passage without one counts as not relevant (the TREC convention).

`records` reads the file, `judging` grades it, `analysis` compares (with the pure statistics of
`monitor/core/agreement.py`), `render` writes the report, `command` runs the whole.
"""
