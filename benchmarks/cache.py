"""Scenario 9, the response cache pays: repeated identical requests to a python model that sleeps 5 ms
per execution, with `response_cache { enable: true }` on a server started with `--cache-config
local,size=...`, against add_sub (no cache) on the same server, real perf_analyzer (which sends the
same random data in every request) at concurrency 4 over HTTP, measured alternately. Without the
cache the delay model could serve at most 200 requests/s per instance; with it every request after
the first is a hit that never reaches the model, so it should serve about as fast as the cheapest
model. Target: its throughput at least 0.90 of add_sub's."""

from __future__ import annotations

from benchmarks.context import Context, interleaved, round_ratios, summarize
from benchmarks.harness import Load, log, perf_analyzer, start_tcli
from benchmarks.repos import copy_examples, delay_model, read_config, write_config
from benchmarks.table import Row, at_least, ratio

TARGET = 0.90
CONCURRENCY = 4
MODEL, DELAY_MS = "cached_delay", 5.0
CACHE_BYTES = 1 << 20


def rows(ctx: Context) -> list[Row]:
    repo = ctx.workdir / "cache-repo"
    copy_examples(repo, ("add_sub",))
    model_dir = delay_model(repo, MODEL, DELAY_MS, 1)
    config = read_config(model_dir)
    config.response_cache.enable = True
    write_config(model_dir, config)
    server = start_tcli(
        [repo], ctx.workdir / "tcli-cache.log", extra=["--cache-config", f"local,size={CACHE_BYTES}"]
    )
    try:
        server.wait()
        log(f"cache: {MODEL} (5 ms, cached) vs add_sub, c={CONCURRENCY}")
        cached, plain = (Load(model, "http", CONCURRENCY) for model in (MODEL, "add_sub"))
        runs = interleaved(
            [
                lambda: perf_analyzer(cached, server, ctx.windows, ctx.report(f"tcli-{MODEL}")),
                lambda: perf_analyzer(plain, server, ctx.windows, ctx.report("tcli-add_sub-cache")),
            ],
            ctx.rounds,
        )
    finally:
        server.stop()
    ours, theirs = summarize(runs[0]), summarize(runs[1])
    value = ratio(ours.throughput if ours else None, theirs.throughput if theirs else None)
    return [
        Row(
            f"11 response cache: {MODEL} vs add_sub, c={CONCURRENCY}",
            f"{ours.throughput:,.0f}/s" if ours else "n/a",
            f"add_sub {theirs.throughput:,.0f}/s" if theirs else "n/a",
            value,
            f">= {TARGET:.2f}",
            at_least(value, TARGET),
            "a python model sleeping 5 ms per execution with response_cache on, repeated identical "
            "requests; reference: add_sub (no cache) on the same server; " + round_ratios(runs[0], runs[1]),
            {"tcli": ours.runs if ours else [], "reference": theirs.runs if theirs else []},
        )
    ]
