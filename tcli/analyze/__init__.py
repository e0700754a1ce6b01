"""`tcli analyze`: a model's best configuration under a latency budget.

space.py       the candidates: each dimension's values, taken from the model's config and the options
results.py     what one candidate measured, the constraints, ranking, the Pareto front, the closest miss
load.py        the in-process load generator (no socket): perf's worker interface over tcli.inprocess
measure.py     the targets (in-process server, or a running one through model control)
sweep.py       one candidate's concurrency sweep: where it starts, when it stops
search.py      the strategies: brute (every candidate) and quick (one dimension at a time, pruned)
verify.py      the best configs served over HTTP before one is recommended, and at which concurrency
checkpoint.py  measured candidates on disk, so that an interrupted search resumes
progress.py    the Rich progress bar with the best so far and an ETA
outputs.py     the table, JSON and CSV, and the best config written, validated and diffed
plot.py        throughput against p99 per config, the front and the budget (matplotlib)
composing.py   which models an ensemble or a BLS model calls, analyzed one by one
"""
