"""Scenario 14 [analyze]: `tcli analyze` against Model Analyzer 1.58, on the same model, machine and
latency budget (issues 29 and 35).

The model: a python model whose execution of n requests sleeps 2 + 0.25n ms, written with one
instance, max_batch_size 8 and no dynamic batching; a 20 ms p99 budget. Model Analyzer's search:
instance count up to 2, max batch size up to 8, concurrency up to 16.

- Model Analyzer 1.58 (`model-analyzer profile`, from its own virtualenv: MA_VENV, default
  /work/ma-venv; `pip install 'triton-model-analyzer==1.58.*'` there) in brute mode, launching real
  Triton 2.51 locally and driving real perf_analyzer 2.51;
- `tcli analyze` as a user runs it (`tcli analyze -m sleepy REPO --latency-budget 20 --output-dir
  OUT`, no checkpoint: its default quick search over its default space, which is larger: up to 4
  instances, max batch size up to 64, concurrency up to 64, dynamic batching off/on, queue delay,
  python instances in processes or in the server) and, as an info row, its brute mode over Model
  Analyzer's own space and bounds (dynamic batching on, instances in processes).

Each tool's best config is then served by `tcli serve` and measured by real perf_analyzer at the
concurrency the tool found it best at, three times each, alternately (MA's, tcli's, then tcli's,
MA's, ...); a config's figure is the median. Two tools that chose the same config (tcli's default
placement parameter aside) have a ratio of 1 by construction. Goals: tcli's best at least Model
Analyzer's (ratio >= 1.00), and tcli analyze's wall time at most a fifth of Model Analyzer's.

    .venv/bin/python benchmarks/analyze_vs_ma.py            # about 7 minutes, most of it Model Analyzer
    .venv/bin/python benchmarks/run.py --only analyze       # the same, as a row of the benchmark table
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context
from benchmarks.harness import (
    PERF_ANALYZER,
    TCLI,
    TRITONSERVER,
    Load,
    Windows,
    ensure_reference,
    log,
    perf_analyzer,
    start_tcli,
)
from benchmarks.table import Row, at_least, machine, ratio, render

MA_VENV = Path(os.environ.get("MA_VENV", "/work/ma-venv"))
MODEL = "sleepy"
BASE_MS, PER_REQUEST_MS = 2.0, 0.25
BUDGET_MS = 20
MAX_INSTANCES, MAX_BATCH, MAX_CONCURRENCY = 2, 8, 16
THROUGHPUT_TARGET = 1.00
TIME_TARGET = 5.00  # Model Analyzer's wall time over tcli analyze's
MA_TIMEOUT_S = 1800
MEASURE_ROUNDS = 3  # perf_analyzer runs per chosen config, alternated

MODEL_PY = f'''"""Benchmark model: an execution of n requests sleeps {BASE_MS} + {PER_REQUEST_MS} * n ms."""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(({BASE_MS} + {PER_REQUEST_MS} * len(requests)) / 1000.0)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
'''
CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def write_model(repo: Path, name: str = MODEL) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(MODEL_PY)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name))
    return folder


@dataclass
class Choice:
    tool: str
    seconds: float
    config: Path  # the chosen config.pbtxt
    summary: str  # what it chose, in its own words
    concurrency: int  # where it found the config best
    reused: bool = False  # Model Analyzer's run taken from a kept work folder, not run again


def describe(config_text: str) -> str:
    """Instances, max batch size, dynamic batching and placement, read from a config's text."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    count = sum(max(1, group.count) for group in config.instance_group) or 1
    text = f"{count} x batch {config.max_batch_size}"
    if config.HasField("dynamic_batching"):
        delay = config.dynamic_batching.max_queue_delay_microseconds
        text += ", dynamic" + (f" (delay {delay} µs)" if delay else "")
    if "TCLI_INSTANCE_PROCESS" in config.parameters:
        text += (
            ", in-server"
            if config.parameters["TCLI_INSTANCE_PROCESS"].string_value == "false"
            else ", process"
        )
    return text


def run_model_analyzer(work: Path) -> Choice | None:
    tool = MA_VENV / "bin" / "model-analyzer"
    if not tool.exists():
        log(
            f"analyze: no Model Analyzer at {tool} (pip install 'triton-model-analyzer==1.58.*' into MA_VENV)"
        )
        return None
    repo, out = work / "ma-repo", work / "ma-output"
    if not repo.exists():
        write_model(repo)
    command = [
        str(tool), "profile",
        "--model-repository", str(repo),
        "--profile-models", MODEL,
        "--triton-launch-mode", "local",
        "--triton-server-path", str(TRITONSERVER),
        "--perf-analyzer-path", str(PERF_ANALYZER),
        "--run-config-search-mode", "brute",
        "--run-config-search-max-instance-count", str(MAX_INSTANCES),
        "--run-config-search-max-model-batch-size", str(MAX_BATCH),
        "--run-config-search-max-concurrency", str(MAX_CONCURRENCY),
        "--latency-budget", str(BUDGET_MS),
        "--output-model-repository-path", str(out),
        "--override-output-model-repository",
        "--checkpoint-directory", str(work / "ma-checkpoints"),
        "--export-path", str(work / "ma-export"),
    ]  # fmt: skip
    timing = work / "ma-seconds.txt"
    reused = timing.exists()
    if reused:  # a kept work folder (ANALYZE_BENCH_DIR) that already holds Model Analyzer's run
        seconds = float(timing.read_text())
        log(f"analyze: reusing Model Analyzer's run in {work} ({seconds:.0f} s)")
    else:
        (work / "ma-export").mkdir(exist_ok=True)
        log("analyze: Model Analyzer 1.58, brute, against real Triton 2.51 (several minutes)")
        began = time.monotonic()
        done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=MA_TIMEOUT_S)
        seconds = time.monotonic() - began
        (work / "ma.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            log(f"analyze: Model Analyzer failed ({done.returncode}): {(done.stdout + done.stderr)[-800:]}")
            return None
        timing.write_text(f"{seconds:.1f}")
    results = work / "ma-export" / "results" / "metrics-model-inference.csv"
    with results.open() as handle:
        rows = list(csv.DictReader(handle))
    meeting = [r for r in rows if r.get("Satisfies Constraints", "Yes").strip().lower() in ("yes", "true")]
    best = max(meeting or rows, key=lambda r: float(r["Throughput (infer/sec)"]))
    variant = best["Model Config Path"].strip()
    config = out / variant / "config.pbtxt"
    return Choice(
        "Model Analyzer",
        seconds,
        config,
        f"{describe(config.read_text())} ({variant}, {float(best['Throughput (infer/sec)']):,.0f}/s at "
        f"c={best['Concurrency']} by its own measure)",
        int(best["Concurrency"]),
        reused,
    )


# Model Analyzer's bounds, for tcli's brute row
MA_BOUNDS = [
    "--max-instance-count", str(MAX_INSTANCES),
    "--max-batch-size", str(MAX_BATCH),
    "--max-concurrency", str(MAX_CONCURRENCY),
]  # fmt: skip


def run_tcli_analyze(work: Path, tag: str, extra: list[str]) -> Choice | None:
    repo, out = work / f"{tag}-repo", work / f"{tag}-out"
    for stale in (repo, out):  # a kept work folder: tcli's side is always measured afresh
        shutil.rmtree(stale, ignore_errors=True)
    (work / f"{tag}.checkpoint.json").unlink(missing_ok=True)
    write_model(repo)
    command = [
        str(TCLI), "analyze", "-m", MODEL, str(repo),
        "--latency-budget", str(BUDGET_MS),
        "--output-dir", str(out),
        "--checkpoint", str(work / f"{tag}.checkpoint.json"),
        *extra,
    ]  # fmt: skip
    log(f"analyze: tcli analyze {' '.join(extra) or '(as a user runs it: quick, its default space)'}")
    began = time.monotonic()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=MA_TIMEOUT_S)
    seconds = time.monotonic() - began
    (work / f"{tag}.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        log(f"analyze: tcli analyze failed ({done.returncode}): {(done.stdout + done.stderr)[-800:]}")
        return None
    config = out / MODEL / "config.pbtxt"
    # the recommended concurrency (served over HTTP) on the best line, which may wrap anywhere
    found = re.search(r"best\s+for\s.*?at\s+concurrency\s+(\d+)", done.stdout, re.S)
    concurrency = int(found.group(1)) if found else MAX_CONCURRENCY
    return Choice(
        "tcli analyze", seconds, config, f"{describe(config.read_text())}, c={concurrency}", concurrency
    )


def canonical(config_text: str) -> bytes:
    """A config as tcli serves it, without its name: TCLI_INSTANCE_PROCESS "true" is tcli's default."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    config.name = ""
    if (
        "TCLI_INSTANCE_PROCESS" in config.parameters
        and config.parameters["TCLI_INSTANCE_PROCESS"].string_value == "true"
    ):
        del config.parameters["TCLI_INSTANCE_PROCESS"]
    for group in config.instance_group:
        group.name = ""
    return config.SerializeToString(deterministic=True)


@dataclass
class Served:
    throughput: float  # median of the rounds
    p99_ms: float  # median of the rounds
    concurrency: int


def serve_and_measure(
    work: Path, choices: dict[str, Choice], windows: Windows, rounds: int
) -> dict[str, Served]:
    """Each chosen config served by one `tcli serve` and measured by real perf_analyzer at the
    concurrency its tool found it best at, `rounds` times each, alternately (A B, B A, ...)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    repo = work / "measure-repo"
    shutil.rmtree(repo, ignore_errors=True)
    for tag, choice in choices.items():
        folder = write_model(repo, tag)
        config = text_format.Parse(choice.config.read_text(), model_config_pb2.ModelConfig())
        config.name = tag
        (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    server = start_tcli([repo], work / "measure-tcli.log")
    runs: dict[str, list[tuple[float, float]]] = {tag: [] for tag in choices}
    try:
        server.wait()
        tags = list(choices)
        for round_index in range(rounds):
            for tag in tags if round_index % 2 == 0 else list(reversed(tags)):
                concurrency = choices[tag].concurrency
                report = work / f"perf-{tag}-r{round_index}.csv"
                got = perf_analyzer(
                    Load(tag, "http", concurrency, ("--percentile=99",)), server, windows, report
                )
                if got is None:
                    continue
                log(f"analyze: {tag} c={concurrency}: {got.throughput:,.0f}/s p99 {got.p99_us / 1000:.1f} ms")
                runs[tag].append((got.throughput, got.p99_us / 1000))
    finally:
        server.stop()
    return {
        tag: Served(
            statistics.median(t for t, _ in measured),
            statistics.median(p for _, p in measured),
            choices[tag].concurrency,
        )
        for tag, measured in runs.items()
        if measured
    }


def rows(ctx: Context) -> list[Row]:
    work = ctx.workdir / "analyze"
    work.mkdir(exist_ok=True)
    ma = run_model_analyzer(work)
    quick = run_tcli_analyze(work, "tcli-quick", [])
    brute = run_tcli_analyze(
        work,
        "tcli-brute",
        [
            *MA_BOUNDS,
            "--mode",
            "brute",
            "--dynamic-batching",
            "on",
            "--queue-delays",
            "0",
            "--python-placement",
            "process",
        ],
    )
    choices = {tag: c for tag, c in (("ma", ma), ("tcli", quick), ("tcli_brute", brute)) if c is not None}
    windows = Windows(
        ctx.pick(1000, 500), stability_pct=ctx.windows.stability_pct, max_trials=ctx.windows.max_trials
    )
    measured = serve_and_measure(work, choices, windows, MEASURE_ROUNDS) if choices else {}

    def throughput_row(tag: str, label: str, target: str) -> Row:
        ours, theirs, chosen = measured.get(tag), measured.get("ma"), choices.get(tag)
        same = (
            chosen is not None
            and ma is not None
            and canonical(chosen.config.read_text()) == canonical(ma.config.read_text())
        )
        # one config measured twice differs only by the machine's noise: the same choice is a ratio of 1
        value = (
            1.0
            if same and ours and theirs
            else ratio(ours.throughput if ours else None, theirs.throughput if theirs else None)
        )
        return Row(
            f"14{label} analyze: best config's throughput under real perf_analyzer, each at its chosen concurrency",
            f"{ours.throughput:,.0f}/s · p99 {ours.p99_ms:.1f} ms" if ours else "n/a",
            f"MA {theirs.throughput:,.0f}/s · p99 {theirs.p99_ms:.1f} ms" if theirs else "n/a",
            value,
            target,
            at_least(value, THROUGHPUT_TARGET) if target != "info" else None,
            f"tcli chose {chosen.summary if chosen else 'n/a'}; Model Analyzer chose "
            f"{ma.summary if ma else 'n/a'}"
            + ("; the same config (ratio 1 by construction; measured figures shown)" if same else "")
            + f"; both served by tcli serve, median of {MEASURE_ROUNDS} alternated perf_analyzer runs",
        )

    def time_row(tag: str, label: str, target: str) -> Row:
        chosen = choices.get(tag)
        value = ratio(ma.seconds if ma else None, chosen.seconds if chosen else None)
        return Row(
            f"14{label} analyze: wall time, Model Analyzer's over tcli analyze's",
            f"{chosen.seconds:.0f} s" if chosen else "n/a",
            f"MA {ma.seconds:.0f} s" if ma else "n/a",
            value,
            target,
            at_least(value, TIME_TARGET) if target != "info" else None,
            "same model and budget; MA brute over its bounds (real Triton 2.51 + perf_analyzer 2.51"
            + (", its run taken from the kept work folder" if ma and ma.reused else "")
            + "), "
            + (
                "tcli quick as a user runs it (its default, larger space)"
                if tag == "tcli"
                else "tcli brute over MA's space and bounds"
            ),
        )

    return [
        throughput_row("tcli", "a", f">= {THROUGHPUT_TARGET:.2f}"),
        time_row("tcli", "b", f">= {TIME_TARGET:.2f}"),
        throughput_row("tcli_brute", "c", "info"),
        time_row("tcli_brute", "d", "info"),
    ]


def main() -> None:
    ensure_reference()
    began = time.monotonic()
    load_before = os.getloadavg()[0]
    keep = Path(os.environ["ANALYZE_BENCH_DIR"]) if os.environ.get("ANALYZE_BENCH_DIR") else None
    with tempfile.TemporaryDirectory(prefix="tcli-analyze-bench-") as tmp:
        workdir = keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        ctx = Context(
            quick=False, workdir=workdir, windows=Windows(1000, stability_pct=100, max_trials=12), rounds=1
        )
        table = rows(ctx)
    took = time.monotonic() - began
    render(
        table,
        f"tcli analyze vs Model Analyzer ({took / 60:.1f} min), {machine()}, "
        f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}",
    )


if __name__ == "__main__":
    main()
