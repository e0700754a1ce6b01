"""Small python models in Triton's LLM conventions for the OpenAI front end's tests, written into a
test's repository:

- `mock_llm` (decoupled): `text_input`, `stream`, `sampling_parameters` (JSON), `exclude_input_in_output`,
  `return_num_input_tokens`, `return_num_output_tokens`, `return_logprobs`; it generates max_tokens
  words, the first ones saying what arrived (`temperature=0.3`, `top_p=...`, `seed=...`,
  `stops=1`), then `w4 w5 ...`; streamed one word per response, or whole. A prompt holding
  "FAIL" fails at once, "LATE_FAIL" after two words; "SLOW" sends one word, then waits until cancelled.
- `text_echo`: an identity-like model (not decoupled, batching) answering its `text_input` as
  `text_output`: chat answers show the prompt the chat template made. Its config names its
  tokenizer folder (parameter `tokenizer`), whose `tokenizer.json` counts the tokens of `usage`.
- `embedder`: `text_input` -> a 4-float `embedding` and `num_input_tokens`.
- a tokenizer folder whose `tokenizer_config.json` holds a chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

MOCK_LLM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_logprobs" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "logprobs" data_type: TYPE_STRING dims: [ -1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

MOCK_LLM_MODEL = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _value(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self.generate(request)
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = _value(request, "text_input", b"").decode()
        stream = bool(_value(request, "stream", False))
        sampling = json.loads(_value(request, "sampling_parameters", b"{}").decode() or "{}")
        echo = not bool(_value(request, "exclude_input_in_output", True))
        counts = bool(_value(request, "return_num_output_tokens", False))
        logprobs = bool(_value(request, "return_logprobs", False))
        if "FAIL" in prompt and "LATE_FAIL" not in prompt:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("mock_llm failed on purpose")), flags=FINAL)
            return
        words = [
            "temperature=%s" % sampling.get("temperature"),
            "top_p=%s" % sampling.get("top_p"),
            "seed=%s" % sampling.get("seed"),
            "stops=%d" % len(sampling.get("stop") or []),
        ]
        size = int(sampling.get("max_tokens", 16))
        words = (words + ["w%d" % i for i in range(4, size)])[:size]
        prompt_tokens = len(prompt.split())

        def response(text, produced, index, tokens):
            outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))]
            if counts:
                outputs.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.int32)))
                outputs.append(pb_utils.Tensor("num_output_tokens", np.array([produced], dtype=np.int32)))
            if logprobs:
                entries = [{str(index + k): {"logprob": -0.5, "rank": 1, "decoded_token": w + " "},
                            "99": {"logprob": -2.0, "rank": 2, "decoded_token": "other"}}
                           for k, w in enumerate(tokens)]
                outputs.append(pb_utils.Tensor("logprobs", np.array([json.dumps(entries).encode()], dtype=object)))
            return pb_utils.InferenceResponse(outputs)

        if not stream:
            text = (prompt if echo else "") + "".join(w + " " for w in words)
            sender.send(response(text, len(words), 0, words), flags=FINAL)
            return
        for index, word in enumerate(words):
            if "LATE_FAIL" in prompt and index == 2:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("mock_llm failed mid-stream")), flags=FINAL)
                return
            while "SLOW" in prompt and index > 0 and not sender.is_cancelled():
                time.sleep(0.01)
            if sender.is_cancelled():
                sender.send(flags=FINAL)
                return
            sender.send(response(word + " ", 1, index, [word]))
        sender.send(flags=FINAL)
"""

TEXT_ECHO_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters { key: "tokenizer" value { string_value: "tokenizer" } }
"""

TEXT_ECHO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("text_output", pb_utils.get_input_tensor_by_name(r, "text_input").as_numpy())])
            for r in requests
        ]
"""

EMBEDDER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "embedding" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

EMBEDDER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)[0].decode()
            vector = np.array([len(text), text.count("a"), 1.0, -1.0], dtype=np.float32)
            tokens = np.array([len(text.split())], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("embedding", vector), pb_utils.Tensor("num_input_tokens", tokens)
            ]))
        return responses
"""

# a template in the style of chat models' own: roles in brackets, the generation prompt at the end
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}"
    "[{{ message['role'] }}] {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)


def write_tokenizer(folder: Path, template: str = CHAT_TEMPLATE, counts: bool = False) -> Path:
    """A tokenizer folder with `template`; with `counts`, a `tokenizer.json` too (a word-level
    tokenizer splitting at whitespace and punctuation) that token counts are made with."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"chat_template": template, "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if counts:
        from tokenizers import Tokenizer, models, pre_tokenizers

        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _model(repository: Path, name: str, config: str, code: str) -> Path:
    folder = repository / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    (folder / "1" / "model.py").write_text(code)
    return folder


def write_repository(repository: Path) -> Path:
    """The three models; `text_echo/tokenizer` is its tokenizer folder, `tokenizer/` beside the
    repository the server's --openai-tokenizer."""
    _model(repository, "mock_llm", MOCK_LLM_CONFIG, MOCK_LLM_MODEL)
    echo = _model(repository, "text_echo", TEXT_ECHO_CONFIG, TEXT_ECHO_MODEL)
    write_tokenizer(echo / "tokenizer", counts=True)
    _model(repository, "embedder", EMBEDDER_CONFIG, EMBEDDER_MODEL)
    return repository
