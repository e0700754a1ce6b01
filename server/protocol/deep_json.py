"""JSON nested deeper than orjson (1024 levels) or the standard parser (the recursion limit) go.

Triton's parser reads any depth, so a repository request such as `{"ready": [[[...true...]]]}` nested
250,000 deep is answered for what it says ("Invalid value for 'ready': expected a boolean"), not
refused as unreadable. This parser keeps its own stack instead of recursing; it runs only after the
fast parsers gave up on depth.
"""

from __future__ import annotations

import json
import re
from typing import Any

# one token: punctuation, a string, a literal or a number (validated by json.loads when used)
_TOKEN = re.compile(
    rb'\s*(?:([\[\]{}:,])|("(?:[^"\\\x00-\x1f]|\\.)*")|(true|false|null)|'
    rb"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|NaN|-?Infinity))"
)
_LITERALS: dict[bytes, Any] = {b"true": True, b"false": False, b"null": None}
_END = object()  # the close of an empty container, where a value was expected


class DeepJsonError(ValueError):
    pass


def loads_deep(data: bytes) -> Any:
    """The document in `data`, at any depth; DeepJsonError (with the offset) when it is not JSON."""
    stack: list[list[Any] | dict[str, Any]] = []
    keys: list[str | None] = []  # per open object: the key whose value comes next
    position = 0
    result: Any = _END

    def token() -> tuple[int, bytes]:
        nonlocal position
        match = _TOKEN.match(data, position)
        if match is None:
            raise DeepJsonError(f"unexpected character at offset {position}")
        position = match.end()
        return match.lastindex or 0, match.group(match.lastindex or 0)

    def value(kind: int, text: bytes) -> Any:
        if kind == 1:
            if text == b"[":
                return []
            if text == b"{":
                return {}
            if text in b"]}":
                return _END
            raise DeepJsonError(f"unexpected '{text.decode()}' at offset {position - 1}")
        if kind == 3:
            return _LITERALS[text]
        return json.loads(text)  # a string or a number

    while True:
        kind, text = token()
        item = value(kind, text)
        while True:
            if item is _END:  # "]" or "}" right after "[" or "{"
                if not stack or (text == b"]") != isinstance(stack[-1], list) or stack[-1]:
                    raise DeepJsonError(f"unexpected '{text.decode()}' at offset {position - 1}")
                item = stack.pop()
                keys.pop()
            elif isinstance(item, (list, dict)) and (not item) and text in (b"[", b"{"):
                stack.append(item)
                keys.append(None)
                if isinstance(item, dict):  # a key, or "}"
                    kind, text = token()
                    if text == b"}":
                        item = _END
                        continue
                    if kind != 2:
                        raise DeepJsonError(f"expected a key at offset {position - len(text)}")
                    keys[-1] = json.loads(text)
                    if token()[1] != b":":
                        raise DeepJsonError(f"expected ':' at offset {position - 1}")
                break  # the container's first value comes next
            if not stack:
                result = item
                break
            # item completes a value inside the innermost open container
            container = stack[-1]
            if isinstance(container, list):
                container.append(item)
            else:
                container[keys[-1] or ""] = item
            kind, text = token()
            if text == b",":
                if isinstance(container, dict):
                    kind, text = token()
                    if kind != 2:
                        raise DeepJsonError(f"expected a key at offset {position - len(text)}")
                    keys[-1] = json.loads(text)
                    if token()[1] != b":":
                        raise DeepJsonError(f"expected ':' at offset {position - 1}")
                break
            if text != (b"]" if isinstance(container, list) else b"}"):
                raise DeepJsonError(f"unexpected token at offset {position - len(text)}")
            item = stack.pop()
            keys.pop()
            text = b""  # a finished container, not a fresh one
        if result is not _END:
            break
    if data[position:].strip():
        raise DeepJsonError(f"unexpected data after the document at offset {position}")
    return result
