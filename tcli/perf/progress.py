"""The live view of a running `tcli perf`: a progress display on stderr (on a terminal only), and
perf_analyzer's -v lines on stdout, one a measurement window."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tcli import render
from tcli.perf.report import level_header
from tcli.perf.stats import cpp_double

if TYPE_CHECKING:
    from tcli.perf.profiler import Window
    from tcli.perf.report import ReportContext


class Progress:
    """Live progress on stderr (a terminal only), and perf_analyzer's -v window lines on stdout."""

    def __init__(self, context: ReportContext, text: bool, verbose: bool) -> None:
        from rich.console import Console

        self.context = context
        self.text = text
        self.verbose = verbose and text
        self.console = Console(stderr=True)
        self.live: Any = None
        self.label = ""
        self.windows: list[Window] = []
        self.trial = 0
        self.fraction = 0.0

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, transient=True, refresh_per_second=8)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(
                render.perf_progress(
                    self.label,
                    self.trial,
                    self.context.settings.max_trials,
                    self.fraction,
                    self.windows,
                    self.context.settings.percentile,
                )
            )

    # Events
    def level_started(self, value: float) -> None:
        self.label = level_header(self.context, value)
        self.windows = []
        self.trial = 0
        self.fraction = 0.0
        self._refresh()

    def window_progress(self, trial: int, elapsed: float, total: float) -> None:
        self.trial = trial
        self.fraction = elapsed / total if total else 1.0
        self._refresh()

    def window_done(self, trial: int, window: Window) -> None:
        self.windows.append(window)
        self.trial = trial + 1
        self.fraction = 0.0
        self._refresh()
        if self.verbose:
            percentile = self.context.settings.percentile
            if window.latency is None:
                _out(f"  Pass [{trial + 1}] cb::Error: No valid requests recorded within time interval.")
            elif percentile != -1:
                _out(
                    f"  Pass [{trial + 1}] throughput: {_num(window.infer_per_sec)} infer/sec. "
                    f"p{percentile} latency: {window.latency.percentiles_ns[percentile] // 1000} usec"
                )
            else:
                _out(
                    f"  Pass [{trial + 1}] throughput: {_num(window.infer_per_sec)} infer/sec. Avg latency: "
                    f"{window.latency.avg_ns // 1000} usec (std {window.latency.std_us} usec). "
                )


def _num(value: float) -> str:
    return cpp_double(value)


def _out(line: str = "") -> None:
    print(line, flush=True)
