"""`tcli perf` on language models, as GenAI-Perf and AIPerf measure them: a decoupled mock LLM in
Triton's LLM conventions (one word per response, as many as max_tokens asks) served by a real tcli
server, measured over gRPC streaming at two concurrency levels and through the server's OpenAI
front end (chat and completions, streamed); the JSON, the CSV and the table carry time to first
token, inter-token latency, sequence lengths and throughputs. No test asserts a speed."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import run_tcli

MOCK_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "tokenizer" value { string_value: "tokenizer" } }
"""
# one word per response, max_tokens of them (default 3); the prompt's length in words is the first
# word, so that the test can see the prompt the client made
MOCK_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0].decode()
            params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            params = json.loads(params.as_numpy().reshape(-1)[0]) if params is not None else {}
            count = int(params.get("max_tokens", 3))
            words = [str(len(prompt.split()))] + ["word"] * (count - 1)
            for index, word in enumerate(words):
                text = np.array([(" " + word).encode()], dtype=np.object_)
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if index == count - 1 else 0
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)]), flags=flags)
        return None
"""
# decoupled, but not a language model: tcli perf says why it cannot measure it
COUNTER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
COUNTER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("repo")
    for name, config, model in (
        ("mock_llm", MOCK_CONFIG, MOCK_MODEL),
        ("counter", COUNTER_CONFIG, COUNTER_MODEL),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(model)
    # the chat template the OpenAI front end renders chat messages with (config parameter `tokenizer`)
    (repo / "mock_llm" / "tokenizer").mkdir()
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (repo / "mock_llm" / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": template})
    )
    settings = ServerSettings(
        [repo], ControlMode.NONE, http_port=0, grpc_port=0, allow_metrics=False, openai_port=0
    )
    with Server(settings) as running:
        yield running


def perf(server: Server, *args: str) -> tuple[int, str, str]:
    done = run_tcli("perf", *args, "-i", "grpc", "-u", f"localhost:{server.grpc_port}")
    return done.returncode, done.stdout, done.stderr


def test_decoupled_llm_reports_ttft_itl_and_throughput_per_concurrency(
    server: Server, tmp_path: Path
) -> None:
    report = tmp_path / "llm.csv"
    code, out, err = perf(
        server,
        "-m",
        "mock_llm",
        "--concurrency",
        "1:2",
        "--request-count",
        "6",
        "--synthetic-input-tokens-mean",
        "12",
        "--output-tokens-mean",
        "5",
        "--format",
        "json",
        "-f",
        str(report),
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["service_kind"] == "triton" and answer["model"] == "mock_llm"
    assert [level["concurrency"] for level in answer["levels"]] == [1, 2]
    for level in answer["levels"]:
        assert level["request_count"]["avg"] == 6
        assert level["error_request_count"]["avg"] == 0
        assert level["output_sequence_length"]["avg"] == 5  # max_tokens arrived, one token per response
        assert level["input_sequence_length"]["avg"] == 12
        assert level["time_to_first_token"]["unit"] == "ms"
        for tag in ("time_to_first_token", "inter_token_latency", "request_latency"):
            stats = level[tag]
            assert 0 < stats["min"] <= stats["p50"] <= stats["p90"] <= stats["p99"] <= stats["max"]
        assert level["output_token_throughput"]["avg"] > 0
        assert level["request_throughput"]["avg"] > 0
    rows = list(csv.DictReader(report.open()))
    assert {(row["Concurrency"], row["Metric"]) for row in rows} >= {
        ("1", "time_to_first_token"),
        ("2", "inter_token_latency"),
        ("2", "output_token_throughput"),
    }


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_an_openai_endpoint_is_measured_the_same_way(server: Server, endpoint: str) -> None:
    done = run_tcli(
        "perf",
        "-m",
        "mock_llm",
        "--service-kind",
        "openai",
        "--endpoint-type",
        endpoint,
        "-u",
        f"http://127.0.0.1:{server.openai_port}",
        "--concurrency",
        "2",
        "--request-count",
        "4",
        "--synthetic-input-tokens-mean",
        "7",
        "--output-tokens-mean",
        "4",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["service_kind"] == "openai" and answer["endpoint_type"] == endpoint
    (level,) = answer["levels"]
    assert level["concurrency"] == 2 and level["request_count"]["avg"] == 4
    assert level["output_sequence_length"]["avg"] == 4  # max_tokens reached the model, a chunk per word
    assert level["time_to_first_token"]["p50"] > 0 and level["inter_token_latency"]["p50"] > 0


def test_the_table_names_each_figure(server: Server) -> None:
    code, out, err = perf(
        server, "-m", "mock_llm", "--request-count", "2", "--synthetic-input-tokens-mean", "4"
    )
    assert code == 0, err
    for name in (
        "Time to First Token",
        "Inter Token Latency",
        "Output Token Throughput",
        "Request Throughput",
    ):
        assert name in out
    assert "concurrency 1" in out


def test_a_decoupled_model_that_is_not_a_language_model_is_refused_in_one_line(server: Server) -> None:
    code, _, err = perf(server, "-m", "counter")
    assert code == 1
    assert "model 'counter' is decoupled but does not follow Triton's LLM conventions" in err
    assert "Traceback" not in err


def test_a_failing_endpoint_is_reported_not_a_traceback(server: Server) -> None:
    # nothing listens on this URL's port: every request fails, said in one line
    done = run_tcli(
        "perf",
        "-m",
        "mock_llm",
        "--service-kind",
        "openai",
        "-u",
        "http://127.0.0.1:9",
        "--request-count",
        "1",
    )
    assert done.returncode == 1
    assert "every request failed" in done.stderr and "Traceback" not in done.stderr
