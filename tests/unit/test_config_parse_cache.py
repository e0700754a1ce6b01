"""config.pbtxt texts share parses (a text read twice per load; copies of a model that differ in their
name only): every text still parses to exactly what protobuf's own parser makes of it, errors keep
their line and column, and each caller gets a config of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from server.config.parse import ConfigParseError, new_config, parse_config_text

PATH = Path("config.pbtxt")
BODY = 'backend: "python"\ninput {\n  name: "INPUT0"\n  data_type: TYPE_FP32\n  dims: 4\n}\n'


def _protobuf(text: str) -> object:
    config = new_config()
    text_format.Parse(text, config)
    return config


@pytest.mark.parametrize(
    "text",
    [
        'name: "add_sub_1"\n' + BODY,
        'name: "add_sub_2"\n' + BODY,  # a copy differing in its name only
        BODY + 'name: "last.line-name"\n',
        BODY,  # no name at all
        'name: "a" "b"\n' + BODY,  # adjacent strings concatenate
        'name: "a"\n"b"\n' + BODY,  # also across lines
        'name: "m" # a comment\n' + BODY,
        # a name line at the start of a line inside a nested message, the model's own further down
        'input {\nname: "INPUT1"\ndata_type: TYPE_INT32\n}\nname: "outer"\n' + BODY,
        "name: 'single'\n" + BODY,
        'name: "tcli stand-in for the model\'s name"\n' + BODY,
    ],
)
def test_each_text_parses_as_protobuf_parses_it(text: str) -> None:
    for _ in range(2):  # the first parse, then the shared one
        assert parse_config_text(text, PATH) == _protobuf(text)


def test_callers_get_configs_of_their_own() -> None:
    text = 'name: "mine"\nmax_batch_size: 4\n' + BODY
    first = parse_config_text(text, PATH)
    first.max_batch_size = 99
    first.input[0].dims.append(7)
    second = parse_config_text(text, PATH)
    assert second.max_batch_size == 4 and list(second.input[0].dims) == [4]
    assert second == _protobuf(text)


@pytest.mark.parametrize(
    "text",
    [
        'name: "bad"\nmax_batch_size: x\n',
        'name: "bad"\nname: "twice"\n',  # a second top-level name
        'name: "bad"\nmax_batch_sise: 8\n',
        'name: "bad" x\n',
    ],
)
def test_errors_keep_their_place(text: str) -> None:
    with pytest.raises(text_format.ParseError) as expected:
        _protobuf(text)
    for _ in range(2):
        with pytest.raises(ConfigParseError) as caught:
            parse_config_text(text, PATH)
        assert (caught.value.line, caught.value.column) == (
            expected.value.GetLine(),
            expected.value.GetColumn(),
        )
        assert "stand-in" not in caught.value.message
