"""Python model `{name}`: a Hugging Face causal language model generating on CPU with `transformers`.

Written by `tcli repo scaffold` from a Hugging Face model folder; it runs on tcli and on Triton's
python backend. It follows Triton's LLM conventions (those of the vLLM and TensorRT-LLM backends, as
Triton's OpenAI front end and GenAI-Perf call them):

- inputs: `text_input` (the prompt), `stream` (one response per token when true, else one response),
  `sampling_parameters` (a JSON object: max_tokens, temperature, top_p, top_k, seed, stop, min_tokens,
  ignore_eos) or the same as separate inputs (`max_tokens`, `temperature`, `top_p`, `top_k`, `seed`,
  `stop_words`), `exclude_input_in_output`, and `return_num_input_tokens` /
  `return_num_output_tokens` / `return_finish_reason` for the extra outputs;
- outputs: `text_output` (the new text of each response), `num_input_tokens`, `num_output_tokens`,
  `finish_reason`.

The model is decoupled: the requests of one `execute` (up to max_batch_size, merged by the dynamic
batcher) form a group generated together, one forward pass per token for all of them, each
request's text streamed to its own response sender. A thread of its own steps the groups in turn, so
that requests arriving while others generate start at once rather than after them. The config's parameters say where the weights are
(`huggingface_model`, relative to this version folder) and how many threads torch uses
(`cpu_threads`). `transformers` is imported here only, when an instance starts.
"""

import json
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

# vLLM's defaults, which Triton's front ends expect
DEFAULT_MAX_TOKENS = 16
DEFAULT_TEMPERATURE = 1.0
# separate inputs in the TensorRT-LLM style, mapped to the sampling parameter of the same meaning
SEPARATE_INPUTS = {
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "min_tokens": "min_tokens",
    "stop_words": "stop",
}


def _scalar(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    if value.size == 0:
        return None
    item = value[0]
    return item.decode("utf-8") if isinstance(item, bytes) else item.item()


def _strings(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in tensor.as_numpy().reshape(-1)]


class Generation:
    """One request being answered: its prompt, its sampling, the text sent so far."""

    def __init__(self, request, tokenizer, torch):
        text_input = pb_utils.get_input_tensor_by_name(request, "text_input")
        if text_input is None:
            raise ValueError("input 'text_input' is missing")
        prompts = text_input.as_numpy()
        if prompts.size != 1:
            raise ValueError(f"input 'text_input' has {prompts.size} prompts: send one prompt per request")
        self.rank = prompts.ndim
        prompt = prompts.reshape(-1)[0]
        self.prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        self.sender = request.get_response_sender()
        self.request = request
        self.stream = bool(_scalar(request, "stream") or False)
        self.exclude_input = bool(_scalar(request, "exclude_input_in_output") or False)
        self.want_input_count = bool(_scalar(request, "return_num_input_tokens") or False)
        self.want_output_count = bool(_scalar(request, "return_num_output_tokens") or False)
        self.want_finish_reason = bool(_scalar(request, "return_finish_reason") or False)
        params = {}
        text = _scalar(request, "sampling_parameters")
        if text:
            try:
                params = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"input 'sampling_parameters' is not JSON: {exc}") from None
            if not isinstance(params, dict):
                raise ValueError("input 'sampling_parameters' must be a JSON object")
        for name, key in SEPARATE_INPUTS.items():
            value = _strings(request, name) if name == "stop_words" else _scalar(request, name)
            if value not in (None, []):
                params.setdefault(key, value)
        self.max_tokens = int(params.get("max_tokens") or DEFAULT_MAX_TOKENS)
        if self.max_tokens < 1:
            raise ValueError(f"sampling parameter 'max_tokens' must be at least 1, got {self.max_tokens}")
        self.min_tokens = int(params.get("min_tokens") or 0)
        temperature = params.get("temperature")
        self.temperature = DEFAULT_TEMPERATURE if temperature is None else float(temperature)
        self.top_p = float(params.get("top_p") or 1.0)
        self.top_k = int(params.get("top_k") or 0)
        self.ignore_eos = bool(params.get("ignore_eos", False))
        stop = params.get("stop") or []
        self.stop = [stop] if isinstance(stop, str) else [s for s in stop if s]
        self.generator = torch.Generator()
        seed = params.get("seed")
        if seed is not None:
            self.generator.manual_seed(int(seed))
        else:
            self.generator.seed()
        self.ids = tokenizer(self.prompt, add_special_tokens=True)["input_ids"]
        self.tokens = []
        self.text = ""  # the decoded output so far
        self.sent = 0  # characters of self.text already sent
        self.tokens_sent = 0
        self.finish_reason = None

    def response(self, text, tokens, final):
        first = self.sent == 0 and self.tokens_sent == 0
        if first and not self.exclude_input:
            text = self.prompt + text
        shape = [1] * self.rank
        outputs = [
            pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_).reshape(shape))
        ]
        if self.want_input_count:
            outputs.append(
                pb_utils.Tensor("num_input_tokens", np.full(shape, len(self.ids), dtype=np.uint32))
            )
        if self.want_output_count:
            outputs.append(pb_utils.Tensor("num_output_tokens", np.full(shape, tokens, dtype=np.uint32)))
        if self.want_finish_reason and final:
            reason = (self.finish_reason or "").encode("utf-8")
            outputs.append(
                pb_utils.Tensor("finish_reason", np.array([reason], dtype=np.object_).reshape(shape))
            )
        return pb_utils.InferenceResponse(output_tensors=outputs)


class Group:
    """The requests of one `execute`, generated together: their batch's tensors and cache."""

    def __init__(self, generations, pad, torch, cache):
        self.generations = generations
        self.cache = cache  # {argument name: the key/value cache}, filled in place step by step
        width = max(len(g.ids) for g in generations)
        rows = len(generations)
        self.input_ids = torch.full((rows, width), pad, dtype=torch.long)
        self.mask = torch.zeros((rows, width), dtype=torch.long)
        for row, g in enumerate(generations):
            self.input_ids[row, width - len(g.ids) :] = torch.tensor(g.ids, dtype=torch.long)
            self.mask[row, width - len(g.ids) :] = 1
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)

    def done(self):
        return all(g.finish_reason is not None for g in self.generations)

    def fail(self, message):
        for g in self.generations:
            if g.finish_reason is None:
                g.finish_reason = "error"
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
                g.sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def initialize(self, args):
        import inspect

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
        from transformers import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # no bars in the server's log

        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        folder = params.get("huggingface_model") or "."
        if not os.path.isabs(folder):
            folder = os.path.join(args["model_repository"], args["model_version"], folder)
        threads = int(params.get("cpu_threads") or 0)
        if threads > 0:
            torch.set_num_threads(threads)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        self.model.eval()
        self.new_cache = DynamicCache
        # transformers 5 names the key/value cache argument `cache`, earlier releases `past_key_values`
        forward = inspect.signature(self.model.forward).parameters
        self.cache_argument = "cache" if "cache" in forward else "past_key_values"
        self.eos = set()
        for source in (self.model.generation_config, self.model.config):
            ids = getattr(source, "eos_token_id", None)
            self.eos.update(ids if isinstance(ids, list) else [] if ids is None else [ids])
        if self.tokenizer.eos_token_id is not None:
            self.eos.add(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.pad = pad if pad is not None else next(iter(self.eos), 0)
        # requests generate in a thread of their own (the model is decoupled), so that execute returns
        # and the next requests join at the next step
        self.groups = []
        self.stopping = False
        self.work = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="generate", daemon=True)
        self.thread.start()

    def execute(self, requests):
        """Hand the requests to the generation thread as one group and return at once: requests that
        arrive while others generate start at the next step, not when the others end."""
        generations = []
        for request in requests:
            try:
                generations.append(Generation(request, self.tokenizer, self.torch))
            except (ValueError, TypeError) as exc:
                error = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                request.get_response_sender().send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if generations:
            group = Group(generations, self.pad, self.torch, {self.cache_argument: self.new_cache()})
            with self.work:
                self.groups.append(group)
                self.work.notify()
        return None

    def _run(self):
        """The generation thread: one step of every group in turn, until the model unloads."""
        while True:
            with self.work:
                while not self.groups and not self.stopping:
                    self.work.wait()
                if self.stopping:
                    return
                groups = list(self.groups)
            for group in groups:
                try:
                    with self.torch.inference_mode():
                        self._step(group)
                except Exception as exc:  # the group's requests fail, the model goes on
                    group.fail(f"generation failed: {type(exc).__name__}: {exc}")
                if group.done():
                    with self.work:
                        self.groups.remove(group)

    def _step(self, group):
        """One forward pass for the group's requests (left-padded, with the key/value cache), each
        sampled with its own parameters and finished on its own."""
        torch = self.torch
        out = self.model(
            input_ids=group.input_ids,
            attention_mask=group.mask,
            position_ids=group.positions,
            use_cache=True,
            **group.cache,
        )
        logits = out.logits[:, -1, :].float()
        rows = len(group.generations)
        next_ids = torch.full((rows, 1), self.pad, dtype=torch.long)
        for row, g in enumerate(group.generations):
            if g.finish_reason is not None:
                continue
            token = self._sample(logits[row], g)
            next_ids[row, 0] = token
            self._advance(g, token)
        group.input_ids = next_ids
        group.mask = torch.cat([group.mask, torch.ones((rows, 1), dtype=torch.long)], dim=1)
        group.positions = group.positions[:, -1:] + 1

    def _sample(self, logits, g):
        torch = self.torch
        if len(g.tokens) < g.min_tokens or g.ignore_eos:
            for eos in self.eos:
                logits[eos] = float("-inf")
        if g.temperature <= 0:
            return int(torch.argmax(logits))
        logits = logits / g.temperature
        if g.top_k > 0:
            kth = torch.topk(logits, min(g.top_k, logits.numel())).values[-1]
            logits[logits < kth] = float("-inf")
        probs = torch.softmax(logits, dim=-1)
        if g.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < g.top_p
            sorted_probs[~keep] = 0
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=g.generator))

    def _advance(self, g, token):
        """Record one token; send what is new of the text when streaming; finish the request on
        end of sequence, a stop string, max_tokens or cancellation."""
        if token in self.eos and not g.ignore_eos and len(g.tokens) >= g.min_tokens:
            g.finish_reason = "stop"
        else:
            g.tokens.append(token)
            text = str(self.tokenizer.decode(g.tokens, skip_special_tokens=True))
            if not text.endswith("\ufffd"):  # a character whose bytes are not all generated yet
                g.text = text
            for stop in g.stop:
                at = g.text.find(stop)
                if at >= 0:
                    g.text = g.text[:at]
                    g.finish_reason = "stop"
            if g.finish_reason is None and len(g.tokens) >= g.max_tokens:
                g.finish_reason = "length"
            if g.finish_reason is None and g.request.is_cancelled():
                g.finish_reason = "cancelled"
        final = g.finish_reason is not None
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if g.stream:
            new = g.text[g.sent :]
            count = len(g.tokens) - g.tokens_sent
            if new or final:
                g.sender.send(g.response(new, count, final), flags=flags)
                g.sent, g.tokens_sent = len(g.text), len(g.tokens)
        elif final:
            g.sender.send(g.response(g.text, len(g.tokens), final), flags=flags)

    def finalize(self):
        with self.work:
            self.stopping = True
            self.work.notify()
        self.thread.join(timeout=30)
        for group in self.groups:
            group.fail("the model was unloaded")
