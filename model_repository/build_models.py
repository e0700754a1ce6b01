#!/usr/bin/env python3
"""Build the model files of this example repository, offline and deterministically.

    python model_repository/build_models.py            # (re)build what is missing or stale
    python model_repository/build_models.py --force    # rebuild everything
    python model_repository/build_models.py --check    # exit 1 if anything would change
    python model_repository/build_models.py --imagenet-labels-from timm-1.0.31-py3-none-any.whl

What it writes (paths relative to model_repository/):

  simple/1/model.onnx             INT32 add/sub graph made with onnx.helper (batch dim dynamic)
  digits_onnx/1/model.onnx        a small CNN trained on scikit-learn's bundled digits data set
  digits_torchscript/1/model.pt   the same trained network as TorchScript (torch.jit.trace)
  digits_*/digits_labels.txt      class labels "0".."9"
  densenet_onnx/1/model.onnx      a copy of the onnx package's light_densenet121.onnx test model
  densenet_onnx/densenet_labels.txt  only with --imagenet-labels-from (see MODELS.md)

Up to date means: for simple, densenet and the label files, the bytes the script would write
equal the bytes on disk; for the digits models, the recipe hash stored in the file (ONNX
metadata_props / TorchScript extra file "tcli_build_recipe") equals the current recipe, so a
fresh clone never retrains. Training is seeded and single-threaded and takes a few seconds.
Triton ignores plain files at the root of a model repository, so this script lives here.

The functions digits_split() and DIGITS_* are also used by the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent

# Everything that changes the trained digits networks. Bump "version" when the code changes.
DIGITS_RECIPE: dict[str, Any] = {
    "version": 1,
    "network": "conv16-conv32-pool-fc64-fc10-softmax",
    "split": {"test_size": 0.25, "random_state": 0, "stratify": True},
    "seed": 0,
    "epochs": 20,
    "batch_size": 64,
    "optimizer": {"name": "adam", "lr": 0.005},
    "onnx_opset": 17,
}
DIGITS_INPUT_SCALE = 255.0 / 16.0  # scikit-learn's digits are 0..16; the models take 0..255
DIGITS_ONNX_NAMES = ("input", "probabilities")
DIGITS_TORCHSCRIPT_NAMES = ("INPUT__0", "OUTPUT__0")
RECIPE_KEY = "tcli_build_recipe"
ACCURACY_KEY = "test_accuracy"

DENSENET_SOURCE = "backend/test/data/light/light_densenet121.onnx"  # inside the onnx package
COFFEE_MUG_INDEX = 504


def recipe_hash() -> str:
    text = json.dumps(DIGITS_RECIPE, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------- data


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, x_test, y_train, y_test): x FP32 [N, 1, 8, 8] in 0..255 (ink bright), y int64."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images * DIGITS_INPUT_SCALE).astype(np.float32)[:, np.newaxis, :, :]
    split = DIGITS_RECIPE["split"]
    x_train, x_test, y_train, y_test = train_test_split(
        images,
        digits.target.astype(np.int64),
        test_size=split["test_size"],
        random_state=split["random_state"],
        stratify=digits.target if split["stratify"] else None,
    )
    return x_train, x_test, y_train, y_test


def digits_raw_uint8(images: np.ndarray) -> np.ndarray:
    """FP32 [N, 1, 8, 8] 0..255 images as the UINT8 [N, 8, 8] RAW_IMAGE digits_ensemble takes."""
    return np.clip(np.rint(images[:, 0]), 0, 255).astype(np.uint8)


def digits_labels_text() -> str:
    return "".join(f"{digit}\n" for digit in range(10))


# ------------------------------------------------------------------------------- models


def simple_onnx_bytes() -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, INT32 [batch, 16]."""
    import onnx
    from onnx import TensorProto, helper

    def value_info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        "simple",
        [value_info("INPUT0"), value_info("INPUT1")],
        [value_info("OUTPUT0"), value_info("OUTPUT1")],
    )
    model = helper.make_model(
        graph,
        producer_name="tcli model_repository/build_models.py",
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=8,
        doc_string="OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (INT32, batch dim dynamic)",
    )
    onnx.checker.check_model(model)
    return model.SerializeToString()


def densenet_source_path() -> Path:
    import onnx

    return Path(onnx.__file__).resolve().parent / DENSENET_SOURCE


def _digits_network() -> Any:
    """A fresh, untrained network: FP32 [N, 1, 8, 8] in 0..255 -> softmax probabilities [N, 10]."""
    import torch
    from torch import nn

    class DigitsClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Conv2d(1, 16, kernel_size=3, padding=1),
                nn.ReLU(),
                nn.Conv2d(16, 32, kernel_size=3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(32 * 4 * 4, 64),
                nn.ReLU(),
                nn.Linear(64, 10),
            )

        def logits(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers((x - 127.5) / 127.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.logits(x), dim=1)

    return DigitsClassifier()


def train_digits() -> tuple[Any, float]:
    """Train the digits network; returns (network in eval mode, held-out accuracy)."""
    import torch

    x_train, x_test, y_train, y_test = digits_split()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same floating-point sums on every machine
    try:
        torch.manual_seed(DIGITS_RECIPE["seed"])
        network = _digits_network()
        optimizer = torch.optim.Adam(network.parameters(), lr=DIGITS_RECIPE["optimizer"]["lr"])
        loss_fn = torch.nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(DIGITS_RECIPE["seed"])
        inputs, targets = torch.from_numpy(x_train), torch.from_numpy(y_train)
        batch = DIGITS_RECIPE["batch_size"]
        network.train()
        for _ in range(DIGITS_RECIPE["epochs"]):
            order = torch.randperm(len(inputs), generator=generator)
            for begin in range(0, len(order), batch):
                index = order[begin : begin + batch]
                optimizer.zero_grad()
                loss = loss_fn(network.logits(inputs[index]), targets[index])
                loss.backward()
                optimizer.step()
        network.eval()
        with torch.no_grad():
            predicted = network(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    finally:
        torch.set_num_threads(threads)
    return network, float((predicted == y_test).mean())


def digits_onnx_bytes(network: Any, accuracy: float) -> bytes:
    import onnx
    import torch

    input_name, output_name = DIGITS_ONNX_NAMES
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the legacy exporter announces its deprecation
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            network,
            (torch.zeros(2, 1, 8, 8),),
            buffer,
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=DIGITS_RECIPE["onnx_opset"],
            dynamo=False,
        )
    model = onnx.load_from_string(buffer.getvalue())
    model.doc_string = "digits CNN: FP32 [batch,1,8,8] 0..255 ink bright -> softmax [batch,10]"
    onnx.helper.set_model_props(model, {RECIPE_KEY: recipe_hash(), ACCURACY_KEY: f"{accuracy:.4f}"})
    onnx.checker.check_model(model)
    return model.SerializeToString()


def digits_torchscript_bytes(network: Any, accuracy: float) -> bytes:
    import torch

    with torch.no_grad():
        traced = torch.jit.trace(network, (torch.zeros(2, 1, 8, 8),))
    buffer = io.BytesIO()
    extra = {RECIPE_KEY: recipe_hash(), ACCURACY_KEY: f"{accuracy:.4f}"}
    torch.jit.save(traced, buffer, _extra_files=extra)
    return buffer.getvalue()


def onnx_stamp(path: Path) -> str | None:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    return {prop.key: prop.value for prop in model.metadata_props}.get(RECIPE_KEY)


def torchscript_stamp(path: Path) -> str | None:
    """Read the recipe hash from a TorchScript zip without importing torch."""
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(f"/extra/{RECIPE_KEY}"):
                    return archive.read(name).decode()
    except (OSError, zipfile.BadZipFile):
        return None
    return None


def imagenet_labels_from_timm(wheel: Path) -> str:
    """ImageNet-1k class names, Triton densenet_labels.txt style: first WordNet lemma, upper case.

    Reads timm's synset list (class index order) and synset-to-lemma table from a timm wheel
    (`pip download --no-deps timm`).
    """
    with zipfile.ZipFile(wheel) as archive:
        synsets = archive.read("timm/data/_info/imagenet_synsets.txt").decode().split()
        table = archive.read("timm/data/_info/imagenet_synset_to_lemma.txt").decode()
    lemmas = dict(line.split("\t", 1) for line in table.splitlines() if "\t" in line)
    labels = [lemmas[synset].split(",")[0].strip().upper() for synset in synsets]
    if len(labels) != 1000 or labels[COFFEE_MUG_INDEX] != "COFFEE MUG":
        raise SystemExit(f"{wheel}: unexpected ImageNet class list")
    return "".join(f"{label}\n" for label in labels)


# ------------------------------------------------------------------------------ driver


@dataclass
class Builder:
    force: bool
    check: bool
    stale: list[str]

    def put(self, relative: str, make: Callable[[], bytes]) -> None:
        """Write REPO/relative if its bytes differ from make() (or always with --force)."""
        path = REPO / relative
        data = make()
        current = path.read_bytes() if path.exists() else None
        if current == data and not self.force:
            print(f"up to date  {relative}")
            return
        self.write(relative, data)

    def write(self, relative: str, data: bytes) -> None:
        path = REPO / relative
        if self.check:
            print(f"stale       {relative}")
            self.stale.append(relative)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote       {relative} ({len(data):,} bytes)")


def build_digits(builder: Builder) -> None:
    onnx_path, ts_path = "digits_onnx/1/model.onnx", "digits_torchscript/1/model.pt"
    stamp = recipe_hash()
    fresh = onnx_stamp(REPO / onnx_path) == stamp and torchscript_stamp(REPO / ts_path) == stamp
    if fresh and not builder.force:
        print(f"up to date  {onnx_path}, {ts_path} (recipe {stamp})")
        return
    if builder.check:
        builder.write(onnx_path, b"")
        builder.write(ts_path, b"")
        return
    network, accuracy = train_digits()
    print(f"trained     digits CNN: held-out accuracy {accuracy:.4f} (recipe {stamp})")
    builder.write(onnx_path, digits_onnx_bytes(network, accuracy))
    builder.write(ts_path, digits_torchscript_bytes(network, accuracy))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is stale")
    parser.add_argument(
        "--imagenet-labels-from",
        type=Path,
        metavar="TIMM_WHEEL",
        help="regenerate densenet_onnx/densenet_labels.txt from a timm wheel",
    )
    args = parser.parse_args(argv)
    builder = Builder(force=args.force, check=args.check, stale=[])

    builder.put("simple/1/model.onnx", simple_onnx_bytes)
    for model in ("digits_onnx", "digits_torchscript", "digits_ensemble"):
        builder.put(f"{model}/digits_labels.txt", lambda: digits_labels_text().encode())
    build_digits(builder)
    builder.put("densenet_onnx/1/model.onnx", lambda: densenet_source_path().read_bytes())
    labels = "densenet_onnx/densenet_labels.txt"
    if args.imagenet_labels_from:
        builder.put(labels, lambda: imagenet_labels_from_timm(args.imagenet_labels_from).encode())
    elif not (REPO / labels).exists():
        print(f"missing     {labels}: run with --imagenet-labels-from TIMM_WHEEL (see MODELS.md)")
        builder.stale.append(labels)

    if builder.stale:
        print(f"{len(builder.stale)} file(s) stale", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
