"""Writes examples/tiny_llm/: a Hugging Face model folder built here, with nothing downloaded.

A Llama-architecture causal language model with 2 layers and a width of 64, its weights random from
a fixed seed, and a byte-level BPE tokenizer trained on the few lines below, with a chat template.
It generates noise, quickly: it exists so that `tcli repo scaffold examples/tiny_llm` and the
OpenAI front end can be tried, tested and measured on any CPU. Point the scaffold at a real model's
folder (config.json, *.safetensors, tokenizer files) for real text.

The files are committed (about 0.5 MB); run `python examples/make_tiny_llm.py` only to remake them.
Needs torch, transformers and tokenizers (pip install 'tcli[llm]').
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = HERE / "tiny_llm"
SEED = 0

# what the tokenizer learns its merges from (the model itself learns nothing: its weights are random)
TEXT = [
    "Triton serves models from a model repository of folders, one per model.",
    "Each model folder has a config.pbtxt and numbered version folders.",
    "A decoupled model may send many responses to one request, or none.",
    "Language models stream their answer token by token.",
    "The client asks, the server answers, and the metrics count both.",
    "Time to first token and inter-token latency say how fast a model feels.",
    "Throughput says how many tokens per second the server makes for everyone.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello world. How are you today? I am fine, thank you.",
    "Python, numpy and torch run on a laptop, in CI and in a pod.",
]
SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(folder: Path) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(TEXT, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|bos|>",
        eos_token="<|eos|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(folder)
    # one file as every transformers release and Triton's front end read it: the chat template
    # inside tokenizer_config.json, the class by its long-standing name
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config.pop("backend", None)
    config.update(
        tokenizer_class="PreTrainedTokenizerFast", model_max_length=1024, chat_template=CHAT_TEMPLATE
    )
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return fast


def build_model(folder: Path, tokenizer: object) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),  # type: ignore[arg-type]
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,  # type: ignore[attr-defined]
        eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
        pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)


def main() -> None:
    if FOLDER.exists():
        shutil.rmtree(FOLDER)
    FOLDER.mkdir()
    tokenizer = build_tokenizer(FOLDER)
    build_model(FOLDER, tokenizer)
    total = sum(p.stat().st_size for p in FOLDER.iterdir())
    print(f"wrote {FOLDER} ({total / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
