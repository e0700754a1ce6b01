"""The OpenAI-compatible front end (`tcli serve --openai-port 0`) driven by the official `openai`
client, as a user's application drives it: models listed, completions and chat completions whole and
streamed (one chunk per response of the decoupled mock model, usage in the last chunk when asked),
the sampling parameters reaching the model, stop sequences, n choices, logprobs, echo, chat
templates from a tokenizer folder, embeddings, and OpenAI's errors (404 unknown model, 400 naming the
parameter, 500 with the model's own message, an error event mid-stream). Every call has a deadline
(the client's timeout); the client never retries."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

from tests.integration.openai_models import write_repository, write_tokenizer
from tests.integration.serve_process import ServeProcess

DEADLINE = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("openai")
    repository = write_repository(root / "models")
    tokenizer = write_tokenizer(
        root / "tokenizer", "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    )
    server = ServeProcess(str(repository), "--openai-port", "0", "--openai-tokenizer", str(tokenizer))
    try:
        assert server.openai_port, server.output()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(served: ServeProcess) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{served.openai_port}/v1",
        api_key="unused",
        timeout=DEADLINE,
        max_retries=0,
    )


def _url(served: ServeProcess, path: str) -> str:
    return f"http://127.0.0.1:{served.openai_port}{path}"


def test_models_are_listed_and_retrieved(client: openai.OpenAI) -> None:
    names = sorted(model.id for model in client.models.list())
    assert names == ["embedder", "mock_llm", "text_echo"]
    model = client.models.retrieve("mock_llm")
    assert (model.id, model.object, model.owned_by) == ("mock_llm", "model", "Triton Inference Server")
    with pytest.raises(openai.NotFoundError, match="Unknown model: nothing_here"):
        client.models.retrieve("nothing_here")


def test_completion_carries_the_sampling_parameters_and_usage(client: openai.OpenAI) -> None:
    completion = client.completions.create(
        model="mock_llm", prompt="one two three", max_tokens=6, temperature=0.25, top_p=0.5, seed=7
    )
    [choice] = completion.choices
    assert choice.text.split() == ["temperature=0.25", "top_p=0.5", "seed=7", "stops=0", "w4", "w5"]
    assert choice.finish_reason == "length"  # the model made as many tokens as max_tokens allowed
    assert completion.object == "text_completion" and completion.model == "mock_llm"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (3, 6)
    assert completion.usage.total_tokens == 9


def test_default_max_tokens_is_tritons(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="mock_llm", prompt="hello")
    assert len(completion.choices[0].text.split()) == 16


def test_stop_sequences_end_the_text(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="mock_llm", prompt="p", max_tokens=12, stop=["w6"])
    assert completion.choices[0].text.split() == [
        "temperature=None",
        "top_p=None",
        "seed=None",
        "stops=1",
        "w4",
        "w5",
    ]
    assert completion.choices[0].finish_reason == "stop"
    # streamed, the stop sequence split over two responses ("w" then "6 ") still ends the text
    stream = client.completions.create(
        model="mock_llm", prompt="p", max_tokens=12, stop=["5 w6"], stream=True
    )
    text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert text.split() == ["temperature=None", "top_p=None", "seed=None", "stops=1", "w4", "w"]


def test_n_choices_and_seeds(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="mock_llm", prompt="p", max_tokens=3, n=3, seed=10)
    seeds = sorted(choice.text.split()[2] for choice in completion.choices)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert seeds == ["seed=10", "seed=11", "seed=12"]  # each choice its own seed


def test_echo_and_logprobs(client: openai.OpenAI) -> None:
    completion = client.completions.create(
        model="mock_llm", prompt="say: ", max_tokens=2, echo=True, logprobs=2
    )
    choice = completion.choices[0]
    assert choice.text == "say: temperature=None top_p=None "
    assert choice.logprobs is not None
    assert choice.logprobs.tokens == ["temperature=None ", "top_p=None "]
    assert choice.logprobs.token_logprobs == [-0.5, -0.5]
    assert choice.logprobs.top_logprobs == [
        {"temperature=None ": -0.5, "other": -2.0},
        {"top_p=None ": -0.5, "other": -2.0},
    ]


def test_streamed_completion_is_one_chunk_per_response_with_usage_last(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model="mock_llm", prompt="a b", max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    texts = [chunk.choices[0].text for chunk in chunks if chunk.choices]
    assert texts == ["temperature=None ", "top_p=None ", "seed=None ", "stops=0 ", "w4 ", ""]
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (2, 5)


def test_chat_uses_the_models_own_chat_template(client: openai.OpenAI) -> None:
    # text_echo answers its prompt: the chat template of its own tokenizer folder (config parameter)
    chat = client.chat.completions.create(
        model="text_echo",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}],
    )
    message = chat.choices[0].message
    assert message.role == "assistant"
    assert message.content == "<s>[system] Be brief.\n[user] Hi!\n[assistant]"
    # text_echo reports no token counts: its tokenizer.json counts them (its text is its prompt)
    words = [
        "<",
        "s",
        ">[",
        "system",
        "]",
        "Be",
        "brief",
        ".",
        "[",
        "user",
        "]",
        "Hi",
        "!",
        "[",
        "assistant",
        "]",
    ]
    assert chat.usage is not None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (len(words), len(words))
    # mock_llm names none: the server's --openai-tokenizer folder's template
    chat = client.chat.completions.create(
        model="mock_llm", messages=[{"role": "user", "content": "x"}], max_completion_tokens=2, max_tokens=9
    )
    assert chat.choices[0].message.content is not None
    assert chat.choices[0].message.content.split() == [
        "temperature=None",
        "top_p=None",
    ]  # the newer name wins
    assert chat.usage is not None and chat.usage.prompt_tokens == 1  # "<user>x"


def test_chat_streams_role_then_content(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="mock_llm",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=3,
        temperature=0.5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.split() == ["temperature=0.5", "top_p=None", "seed=None"]
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishing == ["length"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_chat_logprobs(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(
        model="mock_llm",
        messages=[{"role": "user", "content": "q"}],
        max_tokens=1,
        logprobs=True,
        top_logprobs=2,
    )
    logprobs = chat.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    [token] = logprobs.content
    assert (token.token, token.logprob) == ("temperature=None ", -0.5)
    assert [alternative.token for alternative in token.top_logprobs] == ["temperature=None ", "other"]


def test_embeddings(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="embedder", input=["banana split", "a"])
    assert [item.embedding for item in result.data] == [[12.0, 3.0, 1.0, -1.0], [1.0, 1.0, 1.0, -1.0]]
    assert result.usage.prompt_tokens == 3
    raw = httpx.post(
        f"{client.base_url}embeddings",
        json={"model": "embedder", "input": "aa", "encoding_format": "base64"},
        timeout=DEADLINE,
    ).json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert vector.tolist() == [2.0, 2.0, 1.0, -1.0]


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-nothing", messages=[{"role": "user", "content": "x"}])
    assert raised.value.body == {
        "message": "Unknown model: gpt-nothing",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }


@pytest.mark.parametrize(
    ("arguments", "param"),
    [
        ({"temperature": 3.5}, "temperature"),
        ({"top_p": -1}, "top_p"),
        ({"max_tokens": -2}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"extra_body": {"stream_options": {"include_usage": True}}}, "stream_options"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
    ],
)
def test_bad_parameters_are_400_naming_them(
    client: openai.OpenAI, arguments: dict[str, object], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model="mock_llm", prompt="x", **arguments)  # type: ignore[call-overload]
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == param
    assert param in raised.value.body["message"] or "stream" in raised.value.body["message"]


def test_a_model_without_logprobs_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="does not return logprobs"):
        client.completions.create(model="text_echo", prompt="x", logprobs=1)


def test_a_failing_model_is_500_with_its_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError, match="mock_llm failed on purpose"):
        client.completions.create(model="mock_llm", prompt="FAIL now")
    with pytest.raises(openai.InternalServerError, match="mock_llm failed on purpose"):
        client.chat.completions.create(
            model="mock_llm", messages=[{"role": "user", "content": "FAIL"}], stream=True
        )


def test_a_model_failing_mid_stream_ends_the_stream_with_an_error_event(
    client: openai.OpenAI, served: ServeProcess
) -> None:
    with pytest.raises(openai.APIError, match="mock_llm failed mid-stream"):
        for _ in client.completions.create(model="mock_llm", prompt="LATE_FAIL", stream=True):
            pass
    # on the wire: two chunks, the error object, then [DONE]
    with httpx.stream(
        "POST",
        _url(served, "/v1/completions"),
        json={"model": "mock_llm", "prompt": "LATE_FAIL", "stream": True},
        timeout=DEADLINE,
    ) as response:
        events = [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]
    assert response.status_code == 200
    assert len(events) == 4 and events[-1] == "[DONE]"
    assert json.loads(events[2])["error"]["message"] == "mock_llm failed mid-stream"


def test_a_template_refusing_the_messages_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="tool messages are not supported") as raised:
        client.chat.completions.create(
            model="text_echo", messages=[{"role": "tool", "content": "x", "tool_call_id": "1"}]
        )
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "messages"


def test_a_client_that_disconnects_mid_stream_cancels_and_the_server_serves_on(
    client: openai.OpenAI, served: ServeProcess
) -> None:
    # "SLOW" makes mock_llm wait on each word until its request is cancelled: only the client's going
    # away ends it, and both of the model's instances must be free again for what follows
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", served.openai_port), timeout=DEADLINE) as connection:
            body = json.dumps(
                {"model": "mock_llm", "prompt": "SLOW", "stream": True, "max_tokens": 3}
            ).encode()
            connection.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert connection.recv(12).startswith(b"HTTP/1.1 200")  # the stream began
    completion = client.completions.create(model="mock_llm", prompt="after", max_tokens=2)
    assert completion.choices[0].text.split() == ["temperature=None", "top_p=None"]
    assert "Traceback" not in served.output()


def test_kserve_front_ends_serve_beside_it(served: ServeProcess) -> None:
    assert httpx.get(f"http://{served.http_url}/v2/health/ready", timeout=DEADLINE).status_code == 200
    assert httpx.get(_url(served, "/health/ready"), timeout=DEADLINE).status_code == 200
    metrics = httpx.get(_url(served, "/metrics"), timeout=DEADLINE).text
    assert 'nv_inference_request_success{model="mock_llm"' in metrics


def test_unknown_path_is_an_openai_error(served: ServeProcess) -> None:
    response = httpx.get(_url(served, "/v1/nothing"), timeout=DEADLINE)
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_a_model_outside_the_conventions_is_400_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="no 'text_output' output") as raised:
        client.chat.completions.create(model="embedder", messages=[{"role": "user", "content": "x"}])
    assert isinstance(raised.value.body, dict) and raised.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError, match="'mock_llm' is not an embedding model"):
        client.embeddings.create(model="mock_llm", input="x")


def test_a_body_that_is_not_a_json_object_is_400(served: ServeProcess) -> None:
    for body in (b"nope", b"[1]"):
        response = httpx.post(_url(served, "/v1/completions"), content=body, timeout=DEADLINE)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
