"""Drive the levels: at each concurrency, warm-up requests first (not counted), then
--request-count requests (default 10 per slot) kept `concurrency` in flight, as AIPerf and GenAI-Perf send them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tcli.perf.llm.clients import GenerationSettings, OpenAIClient, RequestRecord, TritonClient
from tcli.perf.llm.metrics import LevelMetrics, level_metrics
from tcli.perf.llm.prompts import TokenCounter


@dataclass(frozen=True)
class Target:
    service_kind: str  # "openai" or "triton"
    url: str  # base URL (openai) or host:port (triton)
    endpoint_type: str  # chat, completions (openai); kserve (triton)
    streaming: bool
    model_version: str = ""
    inputs: frozenset[str] = frozenset()  # the Triton model's input names
    batched: bool = False  # the Triton model's max_batch_size > 0


def run_levels(
    target: Target,
    settings: GenerationSettings,
    levels: Sequence[int],
    prompts: Sequence[tuple[str, int]],
    request_count: int,
    warmup_count: int,
    counter: TokenCounter,
    on_level: Callable[[LevelMetrics], None] | None = None,
) -> list[LevelMetrics]:
    return asyncio.run(
        _run(target, settings, levels, prompts, request_count, warmup_count, counter, on_level)
    )


async def _run(
    target: Target,
    settings: GenerationSettings,
    levels: Sequence[int],
    prompts: Sequence[tuple[str, int]],
    request_count: int,
    warmup_count: int,
    counter: TokenCounter,
    on_level: Callable[[LevelMetrics], None] | None,
) -> list[LevelMetrics]:
    client: Any
    if target.service_kind == "openai":
        client = OpenAIClient(target.url, target.endpoint_type, settings, target.streaming)
    else:
        client = TritonClient(
            target.url, settings.model, target.model_version, set(target.inputs), target.batched, settings
        )
    results = []
    next_prompt = 0
    try:
        for concurrency in levels:
            senders = [
                client if isinstance(client, OpenAIClient) else client.stream() for _ in range(concurrency)
            ]
            if warmup_count:
                await _send(senders, prompts, next_prompt, warmup_count)
                next_prompt += warmup_count
            count = request_count or 10 * concurrency  # 0: ten requests per slot
            records = await _send(senders, prompts, next_prompt, count)
            next_prompt += count
            for record in records:
                record.output_tokens = counter.count(record.text) if counter.exact else len(record.chunks)
                if settings.server_token_count and record.server_output_tokens is not None:
                    record.output_tokens = record.server_output_tokens
                if settings.server_token_count and record.server_input_tokens is not None:
                    record.input_tokens = record.server_input_tokens
            metrics = level_metrics(concurrency, records)
            results.append(metrics)
            if on_level is not None:
                on_level(metrics)
    finally:
        await client.close()
    return results


async def _send(
    senders: Sequence[Any], prompts: Sequence[tuple[str, int]], first: int, count: int
) -> list[RequestRecord]:
    """`count` requests, each sender (a concurrency slot) sending its next one when its last ends."""
    records: list[RequestRecord] = []
    taken = 0

    async def slot(sender: Any) -> None:
        nonlocal taken
        while taken < count:
            index = first + taken
            taken += 1
            prompt, tokens = prompts[index % len(prompts)]
            records.append(await sender.generate(prompt, tokens))

    await asyncio.gather(*(slot(sender) for sender in senders))
    return records
