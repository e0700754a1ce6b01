"""Read config.pbtxt into `model_config_pb2.ModelConfig` with protobuf's text format parser."""

from __future__ import annotations

import difflib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

CONFIG_FILENAME = "config.pbtxt"


class ConfigParseError(TritonError):
    """A config.pbtxt that protobuf's text format parser rejects; knows the file, line and column."""

    def __init__(self, path: Path, line: int, column: int, reason: str, fix: str | None) -> None:
        message = f"{path}:{line}:{column}: {reason}"
        super().__init__(ErrorCode.INVALID_ARG, message)
        self.path = path
        self.line = line
        self.column = column
        self.reason = reason
        self.fix = fix


def model_config_pb2() -> Any:
    """The generated ModelConfig module from tritonclient: our one source of truth for the schema."""
    from tritonclient.grpc import model_config_pb2 as module

    return module


def new_config() -> ModelConfig:
    return model_config_pb2().ModelConfig()


# configs parsed lately, by their text, newest last: loading a model reads its config.pbtxt twice (for
# its repository agents, then to validate it), and protobuf's text parser is pure python (a third of
# a python model's load before this). Callers get a copy: they complete configs in place.
_parsed: OrderedDict[str, ModelConfig] = OrderedDict()
_parsed_lock = threading.Lock()
_PARSED_KEPT = 64

# Copies of one model differ in their top-level `name: "..."` line only (a repository of 10,000 copies
# of add_sub): their texts are cached with the name replaced by a stand-in, so they share one parse.
_NAME_LINE = re.compile(r'^name[ \t]*:[ \t]*"([A-Za-z0-9_.\-]*)"[ \t]*$', re.MULTILINE)
_NAME_STAND_IN = "tcli stand-in for the model's name"


def parse_config_text(text: str, path: Path) -> ModelConfig:
    """Parse pbtxt text; raise ConfigParseError naming `path`, line and column on failure."""
    named = _NAME_LINE.search(text)
    if named is not None and _NAME_STAND_IN not in text:
        template = text[: named.start(1)] + _NAME_STAND_IN + text[named.end(1) :]
        try:
            parsed = _parsed_copy(template, path)
        except ConfigParseError:
            pass  # parsed below as written, for the error's own line and column
        else:
            # the stand-in must have become the top-level name (not a field of a nested message
            # written from the line's start): then the text as written parses to this with its name
            if parsed.name == _NAME_STAND_IN:
                parsed.name = named.group(1)
                return parsed
    return _parsed_copy(text, path)


def _parsed_copy(text: str, path: Path) -> ModelConfig:
    with _parsed_lock:
        parsed = _parsed.get(text)
    if parsed is None:
        parsed = _parse(text, path)
        with _parsed_lock:
            _parsed[text] = parsed
            while len(_parsed) > _PARSED_KEPT:
                _parsed.popitem(last=False)
    config = new_config()
    config.CopyFrom(parsed)
    return config


def _parse(text: str, path: Path) -> ModelConfig:
    from google.protobuf import text_format

    config = new_config()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine() or 1, exc.GetColumn() or 1
        reason = re.sub(r"^\d+:\d+ : ", "", str(exc))
        # protobuf quotes the whole offending line before the reason; the location already says where
        reason = re.sub(r"^'.*?': (?=[A-Z])", "", reason)
        raise ConfigParseError(path, line, column, reason, _suggest_fix(reason)) from None
    except ValueError as exc:  # protobuf's checks past the grammar, e.g. an enum number out of range
        reason = str(exc)
        line, column = _locate(text, reason.rpartition(": ")[2])
        raise ConfigParseError(path, line, column, reason, "use a value the field's type can hold") from None
    return config


def _locate(text: str, value: str) -> tuple[int, int]:
    """Line and column (1-based) of the first occurrence of `value` in `text`, else 1, 1."""
    offset = text.find(value) if value else -1
    if offset < 0:
        return 1, 1
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def read_config(path: Path) -> tuple[ModelConfig, str]:
    """Parse a config.pbtxt file; returns the config and its text (kept for locating lines)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigParseError(
            path, 1, 1, f"not UTF-8 text ({exc.reason})", "save the file as UTF-8"
        ) from None
    except OSError as exc:
        raise TritonError(ErrorCode.INVALID_ARG, f"{path}: cannot read: {exc.strerror}") from None
    return parse_config_text(text, path), text


def _suggest_fix(reason: str) -> str | None:
    """A concrete next step for the parse errors people actually make."""
    field = re.search(r'Message type "([\w.]+)" has no field named "(\w+)"', reason)
    if field:
        choices = _field_names(field.group(1))
        close = difflib.get_close_matches(field.group(2), choices, n=1)
        if close:
            return f"did you mean '{close[0]}'?"
        return f"known fields: {', '.join(sorted(choices))}"
    enum = re.search(r'Enum type "([\w.]+)" has no value named (\w+)', reason)
    if enum:
        values = _enum_values(enum.group(1))
        close = difflib.get_close_matches(enum.group(2), values, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"{hint}known values: {', '.join(values)}"
    if "Expected" in reason:
        return "check the brackets and quotes around this position: blocks are { ... }, lists are [ ... ]"
    return None


def _field_names(message_full_name: str) -> list[str]:
    from google.protobuf import descriptor_pool

    model_config_pb2()  # registers the descriptors
    try:
        descriptor = descriptor_pool.Default().FindMessageTypeByName(message_full_name)
    except KeyError:
        return []
    return [f.name for f in descriptor.fields]


def _enum_values(enum_full_name: str) -> list[str]:
    from google.protobuf import descriptor_pool

    model_config_pb2()
    try:
        descriptor = descriptor_pool.Default().FindEnumTypeByName(enum_full_name)
    except KeyError:
        return []
    return [v.name for v in descriptor.values]


@dataclass(frozen=True)
class SourceText:
    """The text of a config.pbtxt, used to point a problem at the line a person would edit."""

    path: Path
    text: str

    def line_of(self, *needles: str) -> int | None:
        """Line (1-based) of the last needle, each searched after the previous one was found.

        `line_of("input", '"INPUT0"', "dims")` finds the dims line of input INPUT0. A needle that is not
        found is skipped, so the answer degrades to the nearest enclosing thing rather than to nothing.
        """
        position, found = 0, None
        for needle in needles:
            match = re.compile(rf"(?<![\w]){re.escape(needle)}(?![\w])").search(self.text, position)
            if match:
                position, found = match.end(), match.start()
        if found is None:
            return None
        return self.text.count("\n", 0, found) + 1
