"""The OpenAI front end's pure parts: stop sequences found across the pieces a model streams, the
parameters read and refused with their names, and chat templates rendered as transformers renders
them (bos/eos tokens, named templates, a template that refuses the messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.frontends.openai import params
from server.frontends.openai.chat_template import Templates, tokenizer_folder
from server.frontends.openai.errors import OpenAIError
from server.frontends.openai.generation import StopScanner


def _scan(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    scanner = StopScanner(stops)
    out = ""
    for piece in pieces:
        text, stopped = scanner.feed(piece)
        out += text
        if stopped:
            return out, True
    return out + scanner.flush(), False


@pytest.mark.parametrize(
    ("stops", "pieces", "expected"),
    [
        ([], ["a", "b"], ("ab", False)),
        (["END"], ["one ", "two END three"], ("one two ", True)),
        (["END"], ["one E", "N", "D more"], ("one ", True)),  # split over three pieces
        (["END"], ["one E", "NOUGH"], ("one ENOUGH", False)),  # a held prefix that was not the stop
        (["END"], ["trailing E"], ("trailing E", False)),  # the held tail comes out at the end
        (["xy", "b"], ["aab"], ("aa", True)),
    ],
)
def test_stop_sequences_across_pieces(
    stops: list[str], pieces: list[str], expected: tuple[str, bool]
) -> None:
    assert _scan(stops, pieces) == expected


def _refused(document: dict[str, object], chat: bool = False) -> OpenAIError:
    with pytest.raises(OpenAIError) as raised:
        params.sampling(document, chat)
    return raised.value


def test_parameters_are_read_and_refused_by_name() -> None:
    found = params.sampling(
        {"max_tokens": 5, "temperature": 1, "stop": "x", "n": 2, "logprobs": 3}, chat=False
    )
    assert (found.max_tokens, found.temperature, found.stop, found.n, found.logprobs) == (5, 1.0, ["x"], 2, 3)
    chat = params.sampling({"max_tokens": 5, "max_completion_tokens": 7, "logprobs": True}, chat=True)
    assert (chat.max_tokens, chat.logprobs) == (7, 0)
    assert _refused({"temperature": True}).param == "temperature"
    assert _refused({"top_p": 1.5}).param == "top_p"
    assert _refused({"n": "2"}).param == "n"
    assert _refused({"logprobs": 6}).param == "logprobs"
    assert _refused({"top_logprobs": 2}, chat=True).param == "top_logprobs"
    assert _refused({"stream_options": {"include_usage": True}}).param == "stream_options"
    assert _refused({"suffix": "!"}).param == "suffix"
    with pytest.raises(OpenAIError) as raised:
        params.messages({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
    assert raised.value.param == "messages[0].content"


def test_chat_templates_render_as_transformers_does(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    folder.mkdir()
    named = [
        {
            "name": "default",
            "template": "{{ bos_token }}{% for m in messages %}{{ m.content | upper }}{% endfor %}{{ eos_token }}",
        },
        {"name": "tool_use", "template": "unused"},
    ]
    config = {"chat_template": named, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    template = Templates().for_model("m", folder)
    assert template.render([params.Message("user", "hi")]) == "<s>HI</s>"
    assert tokenizer_folder("", tmp_path / "nowhere", "") is None
    assert tokenizer_folder("tok", tmp_path, "") == folder
    assert tokenizer_folder("", folder, "") == folder  # the model's own folder holds one
    with pytest.raises(OpenAIError, match="Unknown tokenizer: model 'm'"):
        Templates().for_model("m", None)
    (folder / "chat_template.jinja").write_text("{{ raise_exception('no ' + messages[0].role) }}")
    with pytest.raises(Exception, match="no user"):
        Templates().for_model("m", folder).render([params.Message("user", "hi")])


def test_a_tokenizer_that_is_no_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(
        OpenAIError, match=r"names 'meta-llama/Llama-3\.1-8B-Instruct', which is not a folder"
    ):
        Templates().for_model("m", Path("meta-llama/Llama-3.1-8B-Instruct"))


def test_vllm_extensions_reach_the_model() -> None:
    """`min_tokens` and `ignore_eos` (vLLM's, which benchmark clients send) go to the model with the
    other sampling parameters; a wrong type is refused by name."""
    from server.frontends.openai.translate import ModelInputs, generation_request

    found = params.sampling({"max_tokens": 8, "min_tokens": 8, "ignore_eos": True}, chat=False)
    model = ModelInputs("m", False, {"text_input": ("BYTES", (1,))}, frozenset({"text_output"}))
    request = generation_request(model, "hi", found, "1", None)
    assert request.parameters == {"max_tokens": 8, "min_tokens": 8, "ignore_eos": True}
    unset = generation_request(model, "hi", params.sampling({}, chat=False), "2", None)
    assert "ignore_eos" not in unset.parameters and "min_tokens" not in unset.parameters
    assert _refused({"ignore_eos": "yes"}).param == "ignore_eos"
    assert _refused({"min_tokens": -1}).param == "min_tokens"
