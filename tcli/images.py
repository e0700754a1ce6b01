"""Image classification as Triton's image_client does it, in pure functions: decide from a model's
metadata and config whether (and how) it takes images, turn a picture into the input tensor
(Pillow: channel conversion, bilinear resize, dtype, scaling, layout), plan the batches, and print
the classification strings the server returns.

Wording of the checks follows image_client's messages; each adds what tcli expected and what to try.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.protocol import datatypes

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

SCALINGS = ("NONE", "INCEPTION", "VGG")
LAYOUTS = ("FORMAT_NCHW", "FORMAT_NHWC")
# data types image_client can fill with pixels (its C++ ParseType, plus the other numeric types
# the Python client accepts through numpy): every numeric type numpy has
PIXEL_TYPES = datatypes.NUMERIC_TYPE_NAMES
EXPECTED = (
    "tcli infer with images expects one input of 3 dims (CHW or HWC, not counting the batch dim) "
    "with 1 or 3 channels, and one FP32 output vector"
)
GENERIC_HINT = "for other models pass tensors with --input NAME=VALUES"


class NotAClassifier(ValueError):
    """The model's metadata or config does not fit an image classifier."""


class ImageError(ValueError):
    """A file that cannot be read as an image."""


@dataclass(frozen=True)
class ClassifierSpec:
    """What image_client's parse_model extracts: everything needed to build requests."""

    model: str
    max_batch_size: int
    input_name: str
    output_name: str
    datatype: str
    layout: str  # FORMAT_NCHW or FORMAT_NHWC
    c: int
    h: int
    w: int
    layout_deduced: bool = False  # the config said FORMAT_NONE and tcli deduced the layout

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    def input_shape(self, batch_size: int) -> list[int]:
        dims = [self.c, self.h, self.w] if self.layout == "FORMAT_NCHW" else [self.h, self.w, self.c]
        return [batch_size, *dims] if self.batching else dims


def _not_a_classifier(model: str, problem: str) -> NotAClassifier:
    return NotAClassifier(
        f"model '{model}' does not look like an image classifier: {problem}; {EXPECTED}; {GENERIC_HINT}"
    )


def parse_classifier(metadata: dict[str, Any], config: dict[str, Any], batch_size: int = 1) -> ClassifierSpec:
    """image_client's parse_model over the KServe metadata JSON and the config JSON."""
    name = str(metadata.get("name") or config.get("name") or "?")
    inputs = metadata.get("inputs") or []
    outputs = metadata.get("outputs") or []
    config_inputs = config.get("input") or []
    if len(inputs) != 1:
        raise _not_a_classifier(name, f"it has {len(inputs)} inputs")
    if len(outputs) != 1:
        raise _not_a_classifier(name, f"it has {len(outputs)} outputs")
    if len(config_inputs) != 1:
        raise _not_a_classifier(name, f"its configuration has {len(config_inputs)} inputs")
    input_metadata, output_metadata, input_config = inputs[0], outputs[0], config_inputs[0]

    if output_metadata.get("datatype") != "FP32":
        raise _not_a_classifier(name, f"its output type is {output_metadata.get('datatype')}")

    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    if max_batch_size == 0 and batch_size != 1:
        raise NotAClassifier(
            f"batching not supported for model '{name}' (max_batch_size is 0): run it with -b 1"
        )
    if max_batch_size > 0 and batch_size > max_batch_size:
        raise NotAClassifier(
            f"expecting batch size <= {max_batch_size} for model '{name}': lower -b to {max_batch_size} or less"
        )

    # the output must be a vector: all dims but one are 1 (the batch dim does not count)
    output_shape = [int(d) for d in output_metadata.get("shape", [])]
    if max_batch_size > 0:
        output_shape = output_shape[1:]
    if any(d == -1 for d in output_shape):
        raise _not_a_classifier(name, "its output has a variable-size dimension")
    if sum(d > 1 for d in output_shape) > 1:
        raise _not_a_classifier(name, f"its output shape {output_shape} is not a vector")

    input_shape = [int(d) for d in input_metadata.get("shape", [])]
    expected_dims = 3 + (1 if max_batch_size > 0 else 0)
    if len(input_shape) != expected_dims:
        raise _not_a_classifier(
            name,
            f"its input has {len(input_shape)} dimensions {input_shape}, expecting {expected_dims}"
            + (" with the batch dim" if max_batch_size > 0 else ""),
        )
    dims = input_shape[1:] if max_batch_size > 0 else input_shape

    layout = str(input_config.get("format") or "FORMAT_NONE")
    deduced = False
    if layout not in LAYOUTS:
        layout = _deduce_layout(dims) or layout
        deduced = layout in LAYOUTS
    if layout not in LAYOUTS:
        raise _not_a_classifier(
            name,
            f"its input dims {dims} have format {input_config.get('format') or 'FORMAT_NONE'}, "
            "expecting FORMAT_NCHW or FORMAT_NHWC (set format in the model's config.pbtxt)",
        )
    c, h, w = dims if layout == "FORMAT_NCHW" else (dims[2], dims[0], dims[1])
    if h <= 0 or w <= 0 or c <= 0:
        raise _not_a_classifier(name, f"its input dims {dims} have a variable size")
    if c not in (1, 3):
        raise _not_a_classifier(name, f"its input has {c} channels ({layout} dims {dims})")

    datatype = str(input_metadata.get("datatype", ""))
    if datatype not in PIXEL_TYPES:
        raise _not_a_classifier(name, f"its input type is {datatype}")

    return ClassifierSpec(
        model=name,
        max_batch_size=max_batch_size,
        input_name=str(input_metadata.get("name", "")),
        output_name=str(output_metadata.get("name", "")),
        datatype=datatype,
        layout=layout,
        c=c,
        h=h,
        w=w,
        layout_deduced=deduced,
    )


def _deduce_layout(dims: Sequence[int]) -> str | None:
    """For a config without a format: channels first or last, when only one end can be channels."""
    first, last = dims[0] in (1, 3), dims[2] in (1, 3)
    if first and not last:
        return "FORMAT_NCHW"
    if last and not first:
        return "FORMAT_NHWC"
    return None


# images -------------------------------------------------------------------------------------------
def image_files(paths: Iterable[str]) -> list[str]:
    """Each argument as given; a folder becomes its regular files, sorted by name (image_client),
    leaving out hidden ones (.DS_Store, .gitkeep)."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(
                os.path.join(path, name)
                for name in os.listdir(path)
                if not name.startswith(".") and os.path.isfile(os.path.join(path, name))
            )
        elif os.path.exists(path):
            files.append(path)
        else:
            raise ImageError(f"failed to find '{path}': no such file or folder")
    return files


def load_image(path: str | Path) -> Image.Image:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            return image
    except UnidentifiedImageError:
        raise ImageError(
            f"'{path}' is not an image Pillow can read (JPEG, PNG, BMP, ...); "
            "pass image files or a folder that holds only images"
        ) from None
    except OSError as exc:
        raise ImageError(f"cannot read image '{path}': {exc.strerror or exc}") from None


def preprocess(image: Image.Image, spec: ClassifierSpec, scaling: str = "NONE") -> np.ndarray[Any, Any]:
    """image_client.py's preprocess: convert (L or RGB), bilinear resize, cast, scale, lay out."""
    import numpy as np
    from PIL import Image

    sample = image.convert("L" if spec.c == 1 else "RGB")
    resized = np.array(sample.resize((spec.w, spec.h), Image.Resampling.BILINEAR))
    if resized.ndim == 2:
        resized = resized[:, :, np.newaxis]
    dtype = datatypes.wire_to_numpy(spec.datatype)
    typed = resized.astype(dtype)
    if scaling == "INCEPTION":
        scaled = (typed / 127.5) - 1
    elif scaling == "VGG":
        means = (128,) if spec.c == 1 else (123, 117, 104)
        scaled = typed - np.asarray(means, dtype=dtype)
    else:
        scaled = typed
    if spec.layout == "FORMAT_NCHW":
        scaled = np.transpose(scaled, (2, 0, 1))
    return np.ascontiguousarray(scaled, dtype=dtype)


def batch_plan(image_count: int, batch_size: int) -> list[list[int]]:
    """Image indices per request: batches of `batch_size` in order; the last batch is filled by
    starting over from the first image (image_client's wrap-around), so every request is full."""
    if image_count <= 0 or batch_size <= 0:
        return []
    plan: list[list[int]] = []
    index, done = 0, False
    while not done:
        batch = []
        for _ in range(batch_size):
            batch.append(index)
            index = (index + 1) % image_count
            done = done or index == 0
        plan.append(batch)
    return plan


# results ------------------------------------------------------------------------------------------
def class_lines(entry: bytes | str) -> str:
    """One classification string "value:index[:label]" as image_client prints it:
    `    value (index) = label`, the label part only when there is one."""
    text = entry.decode("utf-8", errors="replace") if isinstance(entry, bytes) else str(entry)
    tokens = text.split(":")
    line = "    " + tokens[0]
    if len(tokens) > 1:
        line += f" ({tokens[1]})"
    if len(tokens) > 2:
        line += f" = {tokens[2]}"
    return line


def result_rows(output: np.ndarray[Any, Any], batch_size: int, batching: bool) -> list[list[Any]]:
    """The classification output split per image: [batch, k] for batching models, [k] otherwise."""
    if not batching:
        return [list(output.reshape(-1))]
    if output.ndim == 0 or output.shape[0] != batch_size:
        got = output.shape[0] if output.ndim else 0
        raise ValueError(f"expected {batch_size} results, got {got}")
    return [list(row.reshape(-1)) for row in output]


def request_text(
    request_index: int, batch_size: int, filenames: Sequence[str], rows: Sequence[Sequence[Any]]
) -> str:
    """One request's block of image_client output:

    Request 0, batch size 1
    Image 'mug.jpg':
        15.346230 (504) = COFFEE MUG
    """
    lines = [f"Request {request_index}, batch size {batch_size}"]
    for filename, row in zip(filenames, rows, strict=False):
        lines.append(f"Image '{filename}':")
        lines += [class_lines(entry) for entry in row]
    return "\n".join(lines)


def parse_class(entry: bytes | str) -> dict[str, Any]:
    """A classification string as data: {"score", "index", "label"} (label omitted when absent)."""
    text = entry.decode("utf-8", errors="replace") if isinstance(entry, bytes) else str(entry)
    tokens = text.split(":", 2)
    result: dict[str, Any] = {"score": float(tokens[0])}
    if len(tokens) > 1:
        result["index"] = int(tokens[1])
    if len(tokens) > 2:
        result["label"] = tokens[2]
    return result
