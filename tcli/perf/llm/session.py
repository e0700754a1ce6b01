"""One LLM measurement from the flags to the report: prompts made, levels run, each level's table
printed as it ends (text), then the JSON document or the CSV file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tcli.errors import CliError
from tcli.perf.llm.clients import GenerationSettings
from tcli.perf.llm.metrics import LevelMetrics
from tcli.perf.llm.prompts import TokenCounter, synthetic_prompts
from tcli.perf.llm.report import csv_text, level_table, report_json
from tcli.perf.llm.runner import Target, run_levels


def run(
    target: Target,
    settings: GenerationSettings,
    levels: Sequence[int],
    request_count: int,
    warmup_count: int,
    input_tokens_mean: int,
    input_tokens_stddev: int,
    tokenizer: str | None,
    seed: int,
    output_format: str,
    filename: Path | None,
) -> list[LevelMetrics]:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a file or a pipe: the table whole, as a wide terminal shows it
        console = Console(width=max(console.width, 130))
    try:
        counter = TokenCounter(tokenizer)
    except (OSError, ValueError) as exc:
        raise CliError(f"--tokenizer '{tokenizer}' cannot be loaded: {exc}") from None
    total = sum(request_count or 10 * c for c in levels)
    prompts = synthetic_prompts(
        max(1, total + warmup_count * len(levels)), input_tokens_mean, input_tokens_stddev, counter, seed
    )
    title = f"LLM Metrics | {settings.model} | {target.service_kind} {target.endpoint_type}"

    errors = Console(stderr=True)

    def show(level: LevelMetrics) -> None:
        if output_format == "text":
            console.print(level_table(level, title))
        if level.first_error:  # on stderr: stdout holds the table or the JSON document only
            errors.print(
                f"{level.totals.get('error_request_count', 0):.0f} request(s) failed at concurrency "
                f"{level.concurrency}: {level.first_error}",
                style="yellow",
                highlight=False,
                soft_wrap=True,
            )

    results = run_levels(target, settings, levels, prompts, request_count, warmup_count, counter, show)
    if output_format == "json":
        description: dict[str, Any] = {
            "service_kind": target.service_kind,
            "endpoint_type": target.endpoint_type,
            "streaming": target.streaming,
            "url": target.url,
            "token_count": "server"
            if settings.server_token_count
            else ("tokenizer" if counter.exact else "responses"),
        }
        print(json.dumps(report_json(settings.model, description, results), indent=2))
    if filename is not None:
        try:
            filename.write_text(csv_text(results), encoding="utf-8")
        except OSError as exc:
            raise CliError(f"-f: cannot write '{filename}': {exc.strerror or exc}") from None
    if results and all(level.totals.get("request_count", 0) == 0 for level in results):
        raise CliError(f"every request failed: {results[0].first_error}")
    return results
