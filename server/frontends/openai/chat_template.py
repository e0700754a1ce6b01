"""Chat messages to a prompt through the model's own chat template, as Hugging Face tokenizers render
it: the `chat_template` of a local tokenizer folder's `tokenizer_config.json` (or its
`chat_template.jinja`), a Jinja template rendered in a sandbox with `messages`,
`add_generation_prompt`, `bos_token` and `eos_token`, the globals transformers gives templates
(`raise_exception`, `strftime_now`) and its `tojson`.

Which folder: the model config's parameter `tokenizer` (a path, relative to the model's folder), else
the server's `--openai-tokenizer` (Triton's front end: `--tokenizer`), else the model's folder itself
when it holds a `tokenizer_config.json`. `--openai-chat-template FILE` replaces every model's template,
as Triton's `--chat-template` does. Templates are compiled once per file and its modification time."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.frontends.openai.errors import OpenAIError

if TYPE_CHECKING:
    import jinja2

    from server.frontends.openai.params import Message

CONFIG_PARAMETER = "tokenizer"  # config.pbtxt: parameters { key: "tokenizer" value { string_value: "..." } }
TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"


@dataclass(frozen=True)
class ChatTemplate:
    template: jinja2.Template
    bos_token: str
    eos_token: str

    def render(self, messages: list[Message], add_generation_prompt: bool = True) -> str:
        conversation = [{"role": m.role, "content": m.content} for m in messages]
        return self.template.render(
            messages=conversation,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )


def tokenizer_folder(parameter: str, model_folder: Path | None, default: str) -> Path | None:
    """The tokenizer folder of a model: its config parameter's, the server's default, or its own."""
    if parameter:
        path = Path(parameter)
        return path if path.is_absolute() or model_folder is None else model_folder / path
    if default:
        return Path(default)
    if model_folder is not None and (model_folder / TOKENIZER_CONFIG).is_file():
        return model_folder
    return None


class Templates:
    """Compiled chat templates by file; `override` (--openai-chat-template) replaces every model's."""

    def __init__(self, override: str = "") -> None:
        self.override = override
        self._lock = threading.Lock()
        self._compiled: dict[tuple[Path, float, float], ChatTemplate] = {}

    def for_model(self, model: str, folder: Path | None) -> ChatTemplate:
        if folder is None and not self.override:
            raise OpenAIError(
                500,
                f"Unknown tokenizer: model '{model}' names no tokenizer folder for its chat template "
                f"(config parameter '{CONFIG_PARAMETER}', or tcli serve --openai-tokenizer)",
            )
        if folder is not None and not folder.is_dir() and not self.override:
            raise OpenAIError(
                500,
                f"Unknown tokenizer: model '{model}' names '{folder}', which is not a folder here: tcli reads "
                "tokenizers from local folders (a Hugging Face id can be fetched with `hf download ID "
                "--local-dir DIR`)",
            )
        config_file = folder / TOKENIZER_CONFIG if folder is not None else None
        template_file = Path(self.override) if self.override else None
        if template_file is None and folder is not None and (folder / TEMPLATE_FILE).is_file():
            template_file = folder / TEMPLATE_FILE
        key = (folder or Path(), _mtime(config_file), _mtime(template_file))
        with self._lock:
            found = self._compiled.get(key)
        if found is None:
            found = _load(model, config_file, template_file)
            with self._lock:
                self._compiled[key] = found
        return found


def _mtime(path: Path | None) -> float:
    try:
        return path.stat().st_mtime if path is not None else 0.0
    except OSError:
        return -1.0


def _load(model: str, config_file: Path | None, template_file: Path | None) -> ChatTemplate:
    config: dict[str, Any] = {}
    if config_file is not None:
        try:
            config = json.loads(config_file.read_text())
        except FileNotFoundError:
            if template_file is None:
                raise OpenAIError(
                    500, f"Unknown tokenizer: model '{model}': {config_file} does not exist"
                ) from None
        except (OSError, ValueError) as exc:
            raise OpenAIError(500, f"model '{model}': cannot read {config_file}: {exc}") from None
    if template_file is not None:
        try:
            source: Any = template_file.read_text()
        except OSError as exc:
            raise OpenAIError(
                500, f"model '{model}': cannot read chat template {template_file}: {exc}"
            ) from None
    else:
        source = config.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        named = {item.get("name"): item.get("template") for item in source if isinstance(item, dict)}
        source = named.get("default")
    if not isinstance(source, str) or not source:
        raise OpenAIError(
            500,
            f"model '{model}': {config_file} has no chat_template, so chat messages cannot become a prompt "
            "(use /v1/completions, or give a template with --openai-chat-template)",
        )
    try:
        template = _environment().from_string(source)
    except Exception as exc:  # jinja2's TemplateSyntaxError and its kin: the template is broken
        raise OpenAIError(500, f"model '{model}': its chat template does not compile: {exc}") from None
    return ChatTemplate(template, _token(config.get("bos_token")), _token(config.get("eos_token")))


def _token(value: Any) -> str:
    if isinstance(value, dict):  # AddedToken written out: {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _environment() -> jinja2.Environment:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    def tojson(
        value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
    ) -> str:
        return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment
