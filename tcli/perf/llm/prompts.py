"""Synthetic prompts of a chosen token count, and the token counter for prompts and outputs.

With a tokenizer (--tokenizer: a local folder, read with transformers only then), prompts have the
exact token count and outputs are counted in tokens as GenAI-Perf and AIPerf count them (the text
encoded without special tokens). Without one, a word stands for a token and each streamed response
with text for one output token."""

from __future__ import annotations

import random
from collections.abc import Callable

# the words prompts are drawn from (any text does: the model's answer does not matter to the timing)
WORDS = [
    "the",
    "model",
    "server",
    "answers",
    "each",
    "request",
    "with",
    "tokens",
    "streamed",
    "as",
    "soon",
    "as",
    "they",
    "are",
    "made",
    "while",
    "the",
    "client",
    "measures",
    "time",
    "to",
    "first",
    "token",
    "inter",
    "token",
    "latency",
    "and",
    "throughput",
    "at",
    "every",
    "level",
    "of",
    "load",
    "from",
    "one",
    "request",
    "in",
    "flight",
    "to",
    "many",
    "and",
    "reports",
    "the",
    "percentiles",
    "of",
    "each",
    "figure",
]


class TokenCounter:
    """Counts tokens with a tokenizer, or words when there is none."""

    def __init__(self, tokenizer: str | None) -> None:
        self.encode: Callable[[str], list[int]] | None = None
        if tokenizer:
            from transformers import AutoTokenizer

            loaded = AutoTokenizer.from_pretrained(tokenizer)
            self.encode = lambda text: list(loaded.encode(text, add_special_tokens=False))
            self.decode: Callable[[list[int]], str] = lambda ids: str(loaded.decode(ids))

    @property
    def exact(self) -> bool:
        return self.encode is not None

    def count(self, text: str) -> int:
        if self.encode is None:
            return len(text.split())
        return len(self.encode(text))


def synthetic_prompts(
    count: int, mean: int, stddev: int, counter: TokenCounter, seed: int = 0
) -> list[tuple[str, int]]:
    """`count` prompts (text, token count) of `mean` ± `stddev` tokens (normal, at least 1)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        length = max(1, round(rng.gauss(mean, stddev))) if stddev > 0 else max(1, mean)
        words = [rng.choice(WORDS) for _ in range(length)]
        text = " ".join(words)
        if counter.encode is not None:
            ids = counter.encode(text)
            while len(ids) < length:  # a tokenizer may merge words: add more until long enough
                text += " " + " ".join(rng.choice(WORDS) for _ in range(length - len(ids)))
                ids = counter.encode(text)
            text = counter.decode(ids[:length])
            length = counter.count(text)
        prompts.append((text, length))
    return prompts
