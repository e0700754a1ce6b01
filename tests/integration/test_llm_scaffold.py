"""`tcli repo scaffold` of a Hugging Face model folder (the example examples/tiny_llm: a tiny Llama
with random weights and a tokenizer built in code) writes a decoupled python model in Triton's LLM
conventions that loads, generates on CPU with transformers and streams token by token over gRPC
ModelStreamInfer, with sampling parameters as a JSON string or as separate inputs, and answers the
official `openai` client's streamed chat completions through its own chat template; the server that
serves it does not import transformers or torch itself (its instances do)."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import run_tcli
from tests.integration.test_startup import serve_and_list

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
TINY_LLM = ROOT / "examples" / "tiny_llm"
WAIT = 60.0  # failure timeout; never reached when things work


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("llm") / "models"
    run_tcli("repo", "scaffold", str(TINY_LLM), "-r", str(repo), check=True)
    return repo


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[Server]:
    settings = ServerSettings(
        [repository], ControlMode.NONE, allow_http=False, grpc_port=0, allow_metrics=False, openai_port=0
    )
    with Server(settings) as running:
        yield running


def _tensor(name: str, value: Any, datatype: str) -> grpcclient.InferInput:
    array = np.array([[value]], dtype=np.object_ if datatype == "BYTES" else None)
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def generate(server: Server, prompt: str, **inputs: Any) -> list[dict[str, Any]]:
    """Every response of one streamed request: text, num_output_tokens, final flag; or the error."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    responses: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    tensors = [_tensor("text_input", prompt.encode(), "BYTES")]
    for name, value in inputs.items():
        if isinstance(value, bool):
            tensors.append(_tensor(name, value, "BOOL"))
        elif isinstance(value, int):
            tensors.append(_tensor(name, np.int32(value), "INT32"))
        elif isinstance(value, float):
            tensors.append(_tensor(name, np.float32(value), "FP32"))
        else:
            tensors.append(_tensor(name, value.encode(), "BYTES"))
    wanted = ["text_output", "num_output_tokens", "num_input_tokens", "finish_reason"]
    outputs = [grpcclient.InferRequestedOutput(name) for name in wanted]
    client.async_stream_infer("tiny_llm", tensors, outputs=outputs, enable_empty_final_response=True)
    got: list[dict[str, Any]] = []
    try:
        while True:
            result, error = responses.get(timeout=WAIT)
            if error is not None:
                got.append({"error": str(error)})
                return got
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            entry: dict[str, Any] = {"final": final}
            for name in wanted:
                value = result.as_numpy(name)
                if value is not None:
                    item = value.reshape(-1)[0]
                    entry[name] = item.decode() if isinstance(item, bytes) else int(item)
            got.append(entry)
            if final:
                return got
    finally:
        client.stop_stream()
        client.close()


def test_scaffold_writes_a_decoupled_model_in_triton_llm_conventions(repository: Path) -> None:
    config = (repository / "tiny_llm" / "config.pbtxt").read_text()
    assert "decoupled: true" in config
    for name in ("text_input", "stream", "sampling_parameters", "exclude_input_in_output", "text_output"):
        assert f'name: "{name}"' in config
    assert (repository / "tiny_llm" / "1" / "hf" / "tokenizer_config.json").is_file()
    # the OpenAI front end finds the chat template through this parameter
    assert 'key: "tokenizer"' in config and 'string_value: "1/hf"' in config


def test_streams_one_response_per_token_up_to_max_tokens(server: Server) -> None:
    params = json.dumps({"max_tokens": 6, "temperature": 0, "ignore_eos": True})
    responses = generate(
        server,
        "Hello world",
        stream=True,
        sampling_parameters=params,
        exclude_input_in_output=True,
        return_num_output_tokens=True,
        return_num_input_tokens=True,
        return_finish_reason=True,
    )
    assert "error" not in responses[-1], responses
    assert len(responses) > 1  # streamed, not one answer
    assert sum(r["num_output_tokens"] for r in responses) == 6
    assert responses[0]["num_input_tokens"] > 1
    assert responses[-1]["final"] and responses[-1]["finish_reason"] == "length"
    text = "".join(r["text_output"] for r in responses)
    assert text and not text.startswith("Hello world")  # the prompt excluded
    # greedy: the same prompt gives the same text
    again = generate(
        server, "Hello world", stream=True, sampling_parameters=params, exclude_input_in_output=True
    )
    assert "".join(r["text_output"] for r in again) == text


def test_without_stream_one_response_with_the_prompt_and_separate_sampling_inputs(
    server: Server,
) -> None:
    responses = generate(
        server, "The quick brown fox", max_tokens=3, temperature=0.0, return_num_output_tokens=True
    )
    assert len(responses) == 1 and responses[0]["final"], responses
    assert responses[0]["text_output"].startswith("The quick brown fox")
    assert responses[0]["num_output_tokens"] <= 3


def test_bad_sampling_parameters_answer_an_error_naming_the_input(server: Server) -> None:
    responses = generate(server, "Hello", stream=True, sampling_parameters="{not json")
    assert "error" in responses[-1]
    assert "sampling_parameters" in responses[-1]["error"]


def test_the_openai_client_streams_a_chat_completion_through_the_models_chat_template(server: Server) -> None:
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.openai_port}/v1", api_key="none", timeout=WAIT)
    stream = client.chat.completions.create(
        model="tiny_llm",
        messages=[{"role": "user", "content": "Hello"}],
        stream=True,
        max_tokens=5,
        temperature=1.0,
        seed=1,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 5
    # the prompt went through examples/tiny_llm's chat template: <|bos|><|user|>Hello\n<|assistant|>
    assert chunks[-1].usage.prompt_tokens >= 4
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)


def test_tcli_perf_counts_the_models_own_tokens(server: Server) -> None:
    done = run_tcli(
        "perf", "-m", "tiny_llm", "-i", "grpc", "-u", f"127.0.0.1:{server.grpc_port}", "--request-count", "2",
        "--synthetic-input-tokens-mean", "8", "--output-tokens-mean", "4", "--extra-inputs", "ignore_eos:true",
        "--use-server-token-count", "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    level = json.loads(done.stdout)["levels"][0]
    assert level["output_sequence_length"]["avg"] == 4  # max_tokens and ignore_eos reached the model
    assert level["input_sequence_length"]["avg"] >= 8  # 8 words, as the model's tokenizer counts them


def test_serving_the_language_model_does_not_import_transformers_in_the_server(repository: Path) -> None:
    assert serve_and_list(repository, ("transformers", "torch"))["imported"] == []
