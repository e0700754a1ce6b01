"""Writes the README's example files (they are committed; run it again only to remake them):

- digits/digit_0.png ... digit_9.png: the first picture of each digit in the held-out part of
  scikit-learn's digits (the part `digits_onnx` was not trained on; model_repository/build_models.py
  makes the same split), drawn 32x32 in grey as a scanner would give it.
- broken_repo/simple: the example `simple` model with the most common Triton mistake in its config,
  dims that include the batch dimension.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent / "model_repository"


def digit_pictures() -> None:
    digits = load_digits()
    _, images, _, labels = train_test_split(
        digits.images, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    folder = HERE / "digits"
    folder.mkdir(exist_ok=True)
    for digit in range(10):
        index = int(np.flatnonzero(labels == digit)[0])
        pixels = np.round(images[index] * 255 / 16).astype(np.uint8)
        picture = Image.fromarray(pixels, "L").resize((32, 32), Image.Resampling.NEAREST)
        picture.save(folder / f"digit_{digit}.png", optimize=True)


def broken_repository() -> None:
    model = HERE / "broken_repo" / "simple"
    (model / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPOSITORY / "simple" / "1" / "model.onnx", model / "1" / "model.onnx")
    config = (REPOSITORY / "simple" / "config.pbtxt").read_text().split("\n", 2)[2]
    header = (
        "# The example `simple` model with the most common Triton mistake: INPUT0's dims include the\n"
        "# batch dimension, which max_batch_size > 0 adds already (`tcli repo validate` explains it).\n"
    )
    (model / "config.pbtxt").write_text(header + config.replace("dims: [ 16 ]", "dims: [ -1, 16 ]", 1))


if __name__ == "__main__":
    digit_pictures()
    broken_repository()
