"""Token counts for `usage` when the model reports none (no `num_input_tokens` /
`num_output_tokens` outputs): the model's tokenizer folder's `tokenizer.json`, read with Hugging Face's
`tokenizers` (installed with transformers; without it, or without the file, usage stays null, as
Triton's front end leaves it). Tokenizers are loaded once per file and its modification time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

TOKENIZER_FILE = "tokenizer.json"


class TokenCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[tuple[Path, float], Any] = {}

    def for_folder(self, folder: Path | None) -> TokenCounter | None:
        if folder is None:
            return None
        path = folder / TOKENIZER_FILE
        try:
            key = (path, path.stat().st_mtime)
        except OSError:
            return None
        with self._lock:
            tokenizer = self._loaded.get(key)
        if tokenizer is None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                return None
            try:
                tokenizer = Tokenizer.from_file(str(path))
            except Exception:  # a file `tokenizers` cannot read: no counts, as without one
                return None
            with self._lock:
                self._loaded[key] = tokenizer
        return TokenCounter(tokenizer)


class TokenCounter:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
