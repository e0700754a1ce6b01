"""The documents OpenAI's API answers: completions and chat completions (whole, and as stream chunks),
their logprobs in each endpoint's shape, model objects and embeddings."""

from __future__ import annotations

import base64
import sys
from typing import Any

import numpy as np

OWNED_BY = "Triton Inference Server"  # as Triton's front end names the owner of every model


def model_object(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}


def _ranked(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A token's alternatives (vLLM: {token_id: {logprob, rank, decoded_token}}), the chosen first."""
    items = [value for value in entry.values() if isinstance(value, dict)]
    return sorted(items, key=lambda item: item.get("rank", sys.maxsize))


def chat_logprobs(entries: list[dict[str, Any]], top: int) -> dict[str, Any]:
    content = []
    for entry in entries:
        ranked = _ranked(entry)
        if not ranked:
            continue
        chosen = ranked[0]
        token = str(chosen.get("decoded_token", ""))
        content.append(
            {
                "token": token,
                "logprob": float(chosen.get("logprob", 0.0)),
                "bytes": list(token.encode()),
                "top_logprobs": [
                    {
                        "token": str(item.get("decoded_token", "")),
                        "logprob": float(item.get("logprob", 0.0)),
                        "bytes": list(str(item.get("decoded_token", "")).encode()),
                    }
                    for item in ranked[:top]
                ],
            }
        )
    return {"content": content}


def completion_logprobs(entries: list[dict[str, Any]], top: int, offset: int = 0) -> dict[str, Any]:
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    for entry in entries:
        ranked = _ranked(entry)
        if not ranked:
            continue
        token = str(ranked[0].get("decoded_token", ""))
        offsets.append(offset)
        offset += len(token)
        tokens.append(token)
        token_logprobs.append(float(ranked[0].get("logprob", 0.0)))
        top_logprobs.append(
            {
                str(item.get("decoded_token", "")): float(item.get("logprob", 0.0))
                for item in ranked[: max(top, 1)]
            }
        )
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": top_logprobs,
    }


def completion(
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, int] | None,
    kind: str = "text_completion",
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": kind,
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage,
    }


def chat_completion(
    request_id: str, created: int, model: str, choices: list[dict[str, Any]], usage: dict[str, int] | None
) -> dict[str, Any]:
    return completion(request_id, created, model, choices, usage, "chat.completion")


def chat_chunk(
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None or not choices:
        chunk["usage"] = usage
    return chunk


def completion_chunk(
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    chunk = completion(request_id, created, model, choices, usage)
    if usage is None and choices:
        del chunk["usage"]
    return chunk


def embedding_item(index: int, vector: list[float], encoding_format: str) -> dict[str, Any]:
    value: Any = vector
    if encoding_format == "base64":  # little-endian float32, as OpenAI encodes it
        value = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return {"object": "embedding", "index": index, "embedding": value}
