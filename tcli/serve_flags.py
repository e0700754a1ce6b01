"""tritonserver's flags that `tcli serve` accepts without acting on them, or refuses, each with why.

`tcli serve` declares the flags it implements as options of its own. Every other flag of
tritonserver 2.51 (and of Triton's OpenAI front end's program) is listed here, so that a command line written for Triton starts tcli: flags that
only matter on a GPU or inside Triton's C++ (memory pools, thread counts, keepalive tuning) are
accepted and named in one warning line; flags whose absence would change what a client gets in a
way that matters (other front ends: SageMaker, Vertex AI) are refused with an error unless they ask
for the off setting, because running without them would be silently misleading. Both `--flag=value`
and `--flag value` are read, as tritonserver reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU = "GPU or Triton C++ tuning; no effect in tcli"
LATER = "not implemented by tcli yet; no effect"


@dataclass(frozen=True)
class Flag:
    reason: str
    takes_value: bool = True
    refuse_unless: str | None = None  # refuse any value but this one ("false"): a feature tcli lacks


FLAGS: dict[str, Flag] = {
    # model repository
    "model-namespacing": Flag("models are one namespace in tcli; no effect", refuse_unless="false"),
    "enable-peer-access": Flag(GPU),
    # HTTP
    "http-thread-count": Flag("tcli serves HTTP from one event loop; no effect"),
    # gRPC
    "grpc-infer-allocation-pool-size": Flag(GPU),
    "grpc-infer-response-compression-level": Flag(LATER),
    "grpc-keepalive-time": Flag(GPU),
    "grpc-keepalive-timeout": Flag(GPU),
    "grpc-keepalive-permit-without-calls": Flag(GPU),
    "grpc-http2-max-pings-without-data": Flag(GPU),
    "grpc-http2-min-recv-ping-interval-without-data": Flag(GPU),
    "grpc-http2-max-ping-strikes": Flag(GPU),
    "grpc-max-connection-age": Flag(GPU),
    "grpc-max-connection-age-grace": Flag(GPU),
    # other front ends
    "allow-sagemaker": Flag("the SageMaker front end is not implemented by tcli", refuse_unless="false"),
    "sagemaker-port": Flag("the SageMaker front end is not implemented by tcli; no effect"),
    "sagemaker-safe-port-range": Flag("the SageMaker front end is not implemented by tcli; no effect"),
    "sagemaker-thread-count": Flag("the SageMaker front end is not implemented by tcli; no effect"),
    "allow-vertex-ai": Flag("the Vertex AI front end is not implemented by tcli", refuse_unless="false"),
    "vertex-ai-port": Flag("the Vertex AI front end is not implemented by tcli; no effect"),
    "vertex-ai-thread-count": Flag("the Vertex AI front end is not implemented by tcli; no effect"),
    "vertex-ai-default-model": Flag("the Vertex AI front end is not implemented by tcli; no effect"),
    # metrics
    "allow-gpu-metrics": Flag("no GPU metrics without a GPU; no effect"),
    # tracing, caching, rate limiting
    "cache-directory": Flag("tcli's local response cache is built in, not a library; no effect"),
    # memory and devices
    "pinned-memory-pool-byte-size": Flag(GPU),
    "cuda-memory-pool-byte-size": Flag(GPU),
    "cuda-virtual-address-size": Flag(GPU),
    "min-supported-compute-capability": Flag(GPU),
    "buffer-manager-thread-count": Flag(GPU),
    "host-policy": Flag(GPU),
    "model-load-gpu-limit": Flag(GPU),
    # Triton's OpenAI front end's own program (python/openai/openai_frontend/main.py), whose
    # --openai-port, --tokenizer, --chat-template, --default-max-tokens and --openai-restricted-api
    # `tcli serve` implements (server/frontends/openai/): its other flags, so that its command lines run
    "backend": Flag("the OpenAI front end reads each model's request format from its inputs; no effect"),
    "enable-kserve-frontends": Flag("tcli serves KServe HTTP and gRPC beside it always; no effect", False),
    "tool-call-parser": Flag("tool calling is not implemented by tcli's OpenAI front end; no effect"),
    "max-tool-call-parse-bytes": Flag(
        "tool calling is not implemented by tcli's OpenAI front end; no effect"
    ),
    "lora-separator": Flag("LoRA adapters are not implemented by tcli's OpenAI front end; no effect"),
    "uvicorn-log-level": Flag("tcli's front ends log as --log-* say; no effect"),
}


class FlagError(ValueError):
    """A flag tcli cannot take; the message is the one line to show."""


def read_extra_flags(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split what `tcli serve` did not declare into repositories (plain arguments) and the tritonserver
    flags of this table, by name with their values. Raises FlagError for an unknown flag, a missing
    value, or a refused setting."""
    found: dict[str, list[str]] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if not token.startswith("--"):
            positional.append(token)
            continue
        name, equals, value = token[2:].partition("=")
        flag = FLAGS.get(name)
        if flag is None:
            raise FlagError(f"No such option: --{name} (it is not a tritonserver 2.51 flag either)")
        if flag.takes_value and not equals:
            if index >= len(args):
                raise FlagError(f"--{name} needs a value")
            value = args[index]
            index += 1
        if flag.refuse_unless is not None and value.strip().lower() not in (flag.refuse_unless, "0", "off"):
            raise FlagError(
                f"--{name}={value}: {flag.reason}; remove the flag (or set it to false) to serve without it"
            )
        found.setdefault(name, []).append(value)
    return positional, found


def warning_line(found: dict[str, list[str]]) -> str | None:
    """One line naming every accepted flag that has no effect, grouped by why."""
    by_reason: dict[str, list[str]] = {}
    for name in found:
        flag = FLAGS[name]
        if flag.refuse_unless is None:
            by_reason.setdefault(flag.reason, []).append(f"--{name}")
    if not by_reason:
        return None
    return "tritonserver flags accepted without effect: " + "; ".join(
        f"{', '.join(names)} ({reason})" for reason, names in by_reason.items()
    )
