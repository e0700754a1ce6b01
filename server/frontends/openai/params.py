"""The parameters of an OpenAI request body, read and checked: every value that is not what OpenAI's
API takes is refused with a 400 naming the parameter. Parameters tcli cannot honour (token-id prompts,
`suffix`, `logit_bias`, tools) are refused the same way rather than ignored."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.frontends.openai.errors import OpenAIError, invalid

MAX_STOP = 4  # OpenAI takes up to four stop sequences
MAX_N = 128


@dataclass
class Sampling:
    """What a completion or chat request asks of generation, as the model's inputs will carry it."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: int | None = None  # top alternatives asked per token (0: the chosen token's only); None: none
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    # vLLM's extensions, which Triton's front end passes on and AIPerf's users send (--extra-inputs)
    min_tokens: int | None = None
    ignore_eos: bool | None = None


@dataclass
class Message:
    role: str
    content: str


def read_body(body: bytes | bytearray) -> dict[str, Any]:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(400, f"The request body is not valid JSON: {exc}", None, "invalid_json") from None
    if type(document) is not dict:
        raise OpenAIError(400, "The request body must be a JSON object", None, "invalid_json")
    return document


def model_name(document: dict[str, Any]) -> str:
    name = document.get("model")
    if name is None:
        raise invalid("model", "Missing required parameter: 'model'")
    if type(name) is not str or not name:
        raise invalid("model", f"Invalid value for 'model': expected a model name, got {_shown(name)}")
    return name


def sampling(document: dict[str, Any], chat: bool) -> Sampling:
    """The generation parameters of a completions (`chat` False) or chat completions request."""
    found = Sampling()
    found.stream = _boolean(document, "stream", False)
    options = document.get("stream_options")
    if options is not None:
        if not found.stream:
            raise invalid("stream_options", "`stream_options` can only be used when `stream` is True")
        if type(options) is not dict:
            raise invalid("stream_options", "Invalid type for 'stream_options': expected an object")
        found.include_usage = _boolean(options, "include_usage", False, "stream_options.include_usage")
    found.max_tokens = _integer(document, "max_tokens", 0)
    if chat:
        newer = _integer(document, "max_completion_tokens", 0)
        found.max_tokens = newer if newer is not None else found.max_tokens  # the newer name wins
    found.temperature = _number(document, "temperature", 0.0, 2.0)
    found.top_p = _number(document, "top_p", 0.0, 1.0)
    found.presence_penalty = _number(document, "presence_penalty", -2.0, 2.0)
    found.frequency_penalty = _number(document, "frequency_penalty", -2.0, 2.0)
    n = _integer(document, "n", 1, MAX_N)
    found.n = 1 if n is None else n
    found.seed = _integer(document, "seed", -(2**63), 2**64 - 1)
    found.stop = _stop(document.get("stop"))
    found.min_tokens = _integer(document, "min_tokens", 0)
    if document.get("ignore_eos") is not None:
        found.ignore_eos = _boolean(document, "ignore_eos", False)
    for name in ("logit_bias", "suffix", "tools", "functions"):
        if document.get(name) not in (None, {}, [], ""):
            raise invalid(name, f"'{name}' is not supported by tcli's OpenAI front end")
    best_of = _integer(document, "best_of", 1)
    if best_of is not None and best_of > 1:
        raise invalid("best_of", f"Received best_of={best_of}, but only best_of=1 is supported")
    if chat:
        asked = _boolean(document, "logprobs", False)
        top = _integer(document, "top_logprobs", 0, 20)
        if top is not None and not asked:
            raise invalid("top_logprobs", "`top_logprobs` can only be used when `logprobs` is True")
        found.logprobs = (top or 0) if asked else None
    else:
        found.logprobs = _integer(document, "logprobs", 0, 5)
        found.echo = _boolean(document, "echo", False)
    return found


def prompts(document: dict[str, Any]) -> list[str]:
    """A completions request's prompts: a string, or a list of strings (one choice set each)."""
    prompt = document.get("prompt")
    if prompt is None:
        raise invalid("prompt", "Missing required parameter: 'prompt'")
    items = prompt if type(prompt) is list else [prompt]
    if not items:
        raise invalid("prompt", "prompt must be non-empty")
    for item in items:
        if type(item) is not str:
            raise invalid(
                "prompt", "Invalid value for 'prompt': tcli takes text prompts (strings), not token ids"
            )
        if not item:
            raise invalid("prompt", "prompt must be non-empty")
    return items


def messages(document: dict[str, Any]) -> list[Message]:
    """A chat request's messages: role and text (a content list's text parts joined)."""
    found = document.get("messages")
    if found is None:
        raise invalid("messages", "Missing required parameter: 'messages'")
    if type(found) is not list or not found:
        raise invalid("messages", "Invalid value for 'messages': expected a non-empty array of messages")
    result = []
    for index, message in enumerate(found):
        where = f"messages[{index}]"
        if type(message) is not dict:
            raise invalid(where, f"Invalid value for '{where}': expected an object")
        role = message.get("role")
        if type(role) is not str or not role:
            raise invalid(f"{where}.role", f"Invalid value for '{where}.role': expected a role name")
        result.append(Message(role, _content(message.get("content"), f"{where}.content")))
    return result


def _content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is list:
        texts = []
        for part in content:
            if type(part) is not dict or part.get("type") != "text" or type(part.get("text")) is not str:
                raise invalid(where, f"Invalid value for '{where}': tcli takes text parts only")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(where, f"Invalid type for '{where}': expected a string or an array of text parts")


def _stop(value: Any) -> list[str]:
    if value is None:
        return []
    items = [value] if type(value) is str else value
    if type(items) is not list or any(type(item) is not str for item in items):
        raise invalid("stop", "Invalid value for 'stop': expected a string or an array of strings")
    if len(items) > MAX_STOP:
        raise invalid("stop", f"Invalid value for 'stop': at most {MAX_STOP} sequences, got {len(items)}")
    return [item for item in items if item]


def _shown(value: Any) -> str:
    return orjson.dumps(value).decode() if value is not None else "null"


def _boolean(document: dict[str, Any], name: str, default: bool, shown: str = "") -> bool:
    value = document.get(name)
    if value is None:
        return default
    if type(value) is not bool:
        label = shown or name
        raise invalid(label, f"Invalid type for '{label}': expected a boolean, got {_shown(value)}")
    return value


def _integer(document: dict[str, Any], name: str, least: int, most: int | None = None) -> int | None:
    value = document.get(name)
    if value is None:
        return None
    if type(value) is not int:
        raise invalid(name, f"Invalid type for '{name}': expected an integer, got {_shown(value)}")
    if value < least or (most is not None and value > most):
        bound = f"at least {least}" if most is None else f"between {least} and {most}"
        raise invalid(name, f"Invalid value for '{name}': expected {bound}, got {value}")
    return value


def _number(document: dict[str, Any], name: str, least: float, most: float) -> float | None:
    value = document.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise invalid(name, f"Invalid type for '{name}': expected a number, got {_shown(value)}")
    if not least <= value <= most:
        raise invalid(
            name, f"Invalid value for '{name}': expected a number between {least:g} and {most:g}, got {value}"
        )
    return float(value)
