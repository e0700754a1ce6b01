"""Running a completion's choices on the model and reading them back as pieces of text: one inference
request per choice (n choices of each prompt run side by side), each response of a decoupled model one
piece, in the order they come. Stop sequences are applied here too, whatever the model does with
them: the text ends before the first one and the model's request is cancelled. A choice ends with a
finish reason: "length" when the model reported as many tokens as `max_tokens` allowed, else "stop"."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.frontends.openai.translate import generated

if TYPE_CHECKING:
    from server.frontends.openai.token_count import TokenCounter
    from server.protocol.types import InferenceRequest
    from server.service import Admission, InferenceService


@dataclass
class Piece:
    """Text of one choice; its last piece carries the finish reason."""

    index: int
    text: str
    logprobs: list[dict[str, Any]] | None = None
    finish_reason: str | None = None


@dataclass
class Usage:
    """Token counts as the model reports them (`num_input_tokens`, `num_output_tokens`), else as its
    tokenizer counts the prompts and the text generated (`counter`), else none."""

    prompt_tokens: dict[int, int] = field(default_factory=dict)  # per prompt
    completion_tokens: int = 0
    reported: bool = False
    counter: TokenCounter | None = None
    prompts: list[str] = field(default_factory=list)
    texts: dict[int, list[str]] = field(default_factory=dict)  # per choice, what went out

    def document(self) -> dict[str, int] | None:
        if not self.reported:
            if self.counter is None:
                return None
            count = self.counter.count
            prompt = sum(count(text) for text in self.prompts)
            completion = sum(count("".join(parts)) for parts in self.texts.values())
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        prompt = sum(self.prompt_tokens.values())
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
        }


class StopScanner:
    """Text streamed through, held back while it may be the start of a stop sequence."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        self.held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The text that may go out now, and whether a stop sequence was met (nothing follows it)."""
        if not self.stops:
            return text, False
        pending = self.held + text
        cut = min((i for i in (pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.held = ""
            return pending[:cut], True
        keep = 0  # the longest tail of the text that begins a stop sequence
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(pending)), keep, -1):
                if stop.startswith(pending[-size:]):
                    keep = size
                    break
        self.held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep], False

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


@dataclass
class Choice:
    index: int
    prompt: int  # which prompt (its tokens are counted once, whatever n is)
    request: InferenceRequest


async def _run(
    service: InferenceService,
    admission: Admission,
    choice: Choice,
    stops: list[str],
    max_tokens: int | None,
    usage: Usage,
) -> AsyncGenerator[Piece, None]:
    scanner = StopScanner(stops)
    produced = 0
    answers = service.infer_stream(choice.request, admission)
    async with contextlib.aclosing(answers):
        async for item in answers:
            if item.error is not None:
                raise item.error
            if item.response is not None:
                found = generated(item.response)
                if found.prompt_tokens is not None:
                    usage.prompt_tokens[choice.prompt] = found.prompt_tokens
                    usage.reported = True
                if found.completion_tokens is not None:
                    produced += found.completion_tokens
                    usage.completion_tokens += found.completion_tokens
                text, stopped = scanner.feed(found.text)
                if usage.counter is not None:
                    usage.texts.setdefault(choice.index, []).append(text)
                if text or found.logprobs:
                    yield Piece(choice.index, text, found.logprobs)
                if stopped:  # leaving the loop closes the stream: the model's request is cancelled
                    yield Piece(choice.index, "", None, "stop")
                    return
            if item.final:
                break
    length = max_tokens is not None and max_tokens > 0 and produced >= max_tokens
    rest = scanner.flush()
    if usage.counter is not None:
        usage.texts.setdefault(choice.index, []).append(rest)
    yield Piece(choice.index, rest, None, "length" if length else "stop")


_DONE = object()


async def pieces(
    service: InferenceService,
    admission: Admission,
    choices: list[Choice],
    stops: list[str],
    max_tokens: int | None,
    usage: Usage,
) -> AsyncGenerator[Piece, None]:
    """Every choice's pieces as they come. Closing it early cancels every request still running; a
    model's error (TritonError) is raised once, and the other choices' requests are cancelled."""
    if len(choices) == 1:  # the usual case, without a task per choice
        async with contextlib.aclosing(_run(service, admission, choices[0], stops, max_tokens, usage)) as one:
            async for piece in one:
                yield piece
        return
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump(choice: Choice) -> None:
        try:
            async with contextlib.aclosing(_run(service, admission, choice, stops, max_tokens, usage)) as run:
                async for piece in run:
                    queue.put_nowait(piece)
        except Exception as error:
            queue.put_nowait(error)
        finally:
            queue.put_nowait(_DONE)

    tasks = [asyncio.ensure_future(pump(choice)) for choice in choices]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
