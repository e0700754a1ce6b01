"""The search space: which configs `tcli analyze` may try for a model, each a Candidate, and the
config a candidate stands for (the model's own config with the candidate's fields written over it).

Dimensions (each taken from the model and its config, each bound overridable by an option):
instance count; max_batch_size (powers of two; a model whose config says 0 does not batch and stays
at 0); dynamic batching off or on; with it on, preferred batch size (none, or the max batch size) and
max_queue_delay_microseconds; for python models, instances in processes of their own or in the server
(tcli's TCLI_INSTANCE_PROCESS parameter, server/backends/python/placement.py); for onnxruntime, its
intra_op_thread_count and inter_op_thread_count parameters (0: not set); the instance kind, when the
machine has a GPU and the backend can use it.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

PROCESS_PARAMETER = "TCLI_INSTANCE_PROCESS"  # server/backends/python/placement.py
INTRA_PARAMETER = "intra_op_thread_count"
INTER_PARAMETER = "inter_op_thread_count"


@dataclass(frozen=True)
class Candidate:
    instance_count: int = 1
    max_batch_size: int = 0
    dynamic_batching: bool = False
    preferred_max: bool = False  # preferred_batch_size: [max_batch_size]
    max_queue_delay_us: int = 0
    instance_process: bool | None = None  # python models only
    intra_op_threads: int = 0  # onnxruntime only; 0: not set
    inter_op_threads: int = 0
    kind: str = "KIND_CPU"

    def normalized(self) -> Candidate:
        """Fields that mean nothing in this candidate set to their defaults, so that equal configs are
        equal candidates (no queue delay without dynamic batching, no preferred size at batch 1)."""
        if not self.dynamic_batching:
            return dataclasses.replace(self, preferred_max=False, max_queue_delay_us=0)
        if self.max_batch_size <= 1:
            return dataclasses.replace(self, preferred_max=False)
        return self

    def key(self) -> str:
        """A stable identity, for the checkpoint and for equality across runs."""
        parts = [
            f"i{self.instance_count}",
            f"b{self.max_batch_size}",
            "db" if self.dynamic_batching else "nodb",
        ]
        if self.dynamic_batching:
            parts += [f"pref{int(self.preferred_max)}", f"delay{self.max_queue_delay_us}"]
        if self.instance_process is not None:
            parts.append("process" if self.instance_process else "inserver")
        if self.intra_op_threads or self.inter_op_threads:
            parts.append(f"intra{self.intra_op_threads}-inter{self.inter_op_threads}")
        if self.kind != "KIND_CPU":
            parts.append(self.kind.lower())
        return "-".join(parts)

    def label(self) -> str:
        """How a table shows it: '2 x batch 8, dynamic (delay 100 µs), in-server'; a model that
        cannot batch (max_batch_size 0) is '2 x no batching'."""
        batch = f"batch {self.max_batch_size}" if self.max_batch_size else "no batching"
        text = f"{self.instance_count} x {batch}"
        if self.dynamic_batching:
            extras = []
            if self.preferred_max:
                extras.append(f"preferred {self.max_batch_size}")
            if self.max_queue_delay_us:
                extras.append(f"delay {self.max_queue_delay_us} µs")
            text += ", dynamic" + (f" ({', '.join(extras)})" if extras else "")
        if self.instance_process is not None:
            text += ", process" if self.instance_process else ", in-server"
        if self.intra_op_threads or self.inter_op_threads:
            text += f", threads {self.intra_op_threads or '-'}/{self.inter_op_threads or '-'}"
        if self.kind != "KIND_CPU":
            text += ", GPU"
        return text

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# the order quick mode climbs them in: the big levers first
DIMENSIONS = (
    "max_batch_size",
    "instance_count",
    "dynamic_batching",
    "preferred_max",
    "max_queue_delay_us",
    "instance_process",
    "intra_op_threads",
    "inter_op_threads",
    "kind",
)


@dataclass
class Space:
    values: dict[str, list[Any]]  # dimension -> its values, ascending
    start: Candidate  # where quick mode starts: the model's own config, dynamic batching on if it may
    original: Candidate  # the model's own config, as a candidate (ties go to fewer changes from it)

    def candidates(self) -> list[Candidate]:
        """Every distinct candidate (brute mode), in a stable order."""
        seen: dict[str, Candidate] = {}
        for combo in itertools.product(*(self.values[d] for d in DIMENSIONS)):
            candidate = Candidate(**dict(zip(DIMENSIONS, combo, strict=True))).normalized()
            if self.allows(candidate):
                seen.setdefault(candidate.key(), candidate)
        return list(seen.values())

    def allows(self, candidate: Candidate) -> bool:
        """Whether a candidate is a valid config (dynamic batching needs a batching model)."""
        return not (candidate.dynamic_batching and candidate.max_batch_size == 0)

    def size(self) -> int:
        return len(self.candidates())


@dataclass
class Bounds:
    """The options that bound the space; None: taken from the model."""

    min_instance_count: int = 1
    max_instance_count: int = 4
    max_batch_size: int | None = None  # None: 64, or the config's when larger
    dynamic_batching: str = "both"  # both | on | off
    preferred_batch_sizes: list[str] | None = None  # "none", "max"
    queue_delays_us: list[int] | None = None
    python_placement: str = "both"  # both | process | server
    intra_op_threads: list[int] | None = None
    inter_op_threads: list[int] | None = None
    gpu_count: int = 0


def _parameter(config: ModelConfig, name: str) -> str | None:
    return config.parameters[name].string_value if name in config.parameters else None


def _int_parameter(config: ModelConfig, name: str) -> int:
    text = _parameter(config, name)
    try:
        return int(text) if text else 0
    except ValueError:
        return 0


def _runs_on_gpu(backend: str) -> bool:
    from server.backends import table

    entry = table.built_in(backend)
    return entry is not None and entry.gpu


def base_candidate(config: ModelConfig, backend: str, gpu_count: int = 0) -> Candidate:
    """The model's config as it stands, as a candidate."""
    count = sum(max(1, group.count) for group in config.instance_group) or 1
    gpu = any(group.kind == 1 for group in config.instance_group) or (  # KIND_GPU
        not config.instance_group and gpu_count > 0 and _runs_on_gpu(backend)
    )
    dynamic = config.HasField("dynamic_batching")
    preferred = list(config.dynamic_batching.preferred_batch_size) if dynamic else []
    process: bool | None = None
    if backend == "python":
        text = (_parameter(config, PROCESS_PARAMETER) or "true").strip().lower()
        process = text not in ("false", "0", "no", "off")
    return Candidate(
        instance_count=count,
        max_batch_size=config.max_batch_size,
        dynamic_batching=dynamic,
        preferred_max=bool(preferred) and preferred == [config.max_batch_size],
        max_queue_delay_us=config.dynamic_batching.max_queue_delay_microseconds if dynamic else 0,
        instance_process=process,
        intra_op_threads=_int_parameter(config, INTRA_PARAMETER) if backend == "onnxruntime" else 0,
        inter_op_threads=_int_parameter(config, INTER_PARAMETER) if backend == "onnxruntime" else 0,
        kind="KIND_GPU" if gpu else "KIND_CPU",
    ).normalized()


def _powers_of_two(top: int) -> list[int]:
    values, value = [], 1
    while value <= top:
        values.append(value)
        value *= 2
    return values


def build_space(config: ModelConfig, backend: str, bounds: Bounds) -> Space:
    base = base_candidate(config, backend, bounds.gpu_count)
    batching = config.max_batch_size > 0
    top = bounds.max_batch_size if bounds.max_batch_size is not None else max(64, config.max_batch_size)
    sequence = config.HasField("sequence_batching")
    values: dict[str, list[Any]] = {
        "instance_count": list(range(bounds.min_instance_count, bounds.max_instance_count + 1)),
        "max_batch_size": _powers_of_two(top) if batching else [0],
        "dynamic_batching": (
            [False]
            if not batching or sequence or bounds.dynamic_batching == "off"
            else [True]
            if bounds.dynamic_batching == "on"
            else [False, True]
        ),
    }
    preferred = bounds.preferred_batch_sizes or (["none", "max"] if base.preferred_max else ["none"])
    values["preferred_max"] = sorted({p == "max" for p in preferred})
    delays = (
        bounds.queue_delays_us if bounds.queue_delays_us is not None else [0, 500, base.max_queue_delay_us]
    )
    values["max_queue_delay_us"] = sorted(set(delays))
    if backend == "python":
        values["instance_process"] = {"both": [False, True], "process": [True], "server": [False]}[
            bounds.python_placement
        ]
    else:
        values["instance_process"] = [None]
    if backend == "onnxruntime":
        intra = bounds.intra_op_threads or sorted({0, 1, base.intra_op_threads})
        inter = bounds.inter_op_threads or sorted({0, base.inter_op_threads})
    else:
        intra, inter = [0], [0]
    values["intra_op_threads"] = sorted(set(intra))
    values["inter_op_threads"] = sorted(set(inter))
    values["kind"] = (
        ["KIND_CPU", "KIND_GPU"] if bounds.gpu_count > 0 and _runs_on_gpu(backend) else ["KIND_CPU"]
    )
    start = Candidate(**{d: _nearest(values[d], getattr(base, d)) for d in DIMENSIONS}).normalized()
    # quick mode starts with dynamic batching on when it may: without it requests are never batched,
    # and the max batch size could not be judged
    start = dataclasses.replace(start, dynamic_batching=values["dynamic_batching"][-1]).normalized()
    return Space(values, start, base)


def _nearest(values: list[Any], wanted: Any) -> Any:
    """The space's value for a dimension closest to the config's own."""
    if wanted in values:
        return wanted
    if isinstance(wanted, bool) or wanted is None or isinstance(wanted, str):
        return values[-1] if True in values else values[0]
    return min(values, key=lambda v: (abs(v - wanted), v))


def apply(config: ModelConfig, candidate: Candidate) -> ModelConfig:
    """The model's config with the candidate's fields written over it (a copy)."""
    variant = type(config)()
    variant.CopyFrom(config)
    variant.max_batch_size = candidate.max_batch_size
    groups = list(config.instance_group)
    del variant.instance_group[:]
    group = variant.instance_group.add()
    if groups:
        group.CopyFrom(groups[0])
        group.name = ""
    group.count = candidate.instance_count
    group.kind = 1 if candidate.kind == "KIND_GPU" else 2  # KIND_GPU, KIND_CPU
    if candidate.kind != "KIND_GPU":
        del group.gpus[:]
    if candidate.dynamic_batching:
        batching = variant.dynamic_batching
        del batching.preferred_batch_size[:]
        if candidate.preferred_max:
            batching.preferred_batch_size.append(candidate.max_batch_size)
        batching.max_queue_delay_microseconds = candidate.max_queue_delay_us
    elif not config.HasField("sequence_batching"):
        variant.ClearField("dynamic_batching")
    if candidate.instance_process is not None:
        variant.parameters[PROCESS_PARAMETER].string_value = "true" if candidate.instance_process else "false"
    for name, value in (
        (INTRA_PARAMETER, candidate.intra_op_threads),
        (INTER_PARAMETER, candidate.inter_op_threads),
    ):
        if value:
            variant.parameters[name].string_value = str(value)
        elif name in variant.parameters:
            del variant.parameters[name]
    return variant
