"""tcli.images: image_client's model checks, preprocessing, batch plan and output lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tcli import images


def classifier(
    shape: list[int],
    fmt: str | None = "FORMAT_NCHW",
    max_batch_size: int = 0,
    datatype: str = "FP32",
    output_shape: list[int] | None = None,
    output_datatype: str = "FP32",
) -> tuple[dict[str, Any], dict[str, Any]]:
    batch = [-1] if max_batch_size else []
    metadata = {
        "name": "m",
        "inputs": [{"name": "in", "datatype": datatype, "shape": batch + shape}],
        "outputs": [{"name": "out", "datatype": output_datatype, "shape": batch + (output_shape or [1000])}],
    }
    config: dict[str, Any] = {"name": "m", "max_batch_size": max_batch_size, "input": [{"name": "in"}]}
    if fmt is not None:
        config["input"][0]["format"] = fmt
    return metadata, config


def test_parse_nchw_and_nhwc() -> None:
    spec = images.parse_classifier(*classifier([3, 224, 200]))
    assert (spec.layout, spec.c, spec.h, spec.w, spec.batching) == ("FORMAT_NCHW", 3, 224, 200, False)
    assert spec.input_shape(1) == [3, 224, 200]
    spec = images.parse_classifier(*classifier([28, 32, 1], "FORMAT_NHWC", max_batch_size=8), batch_size=8)
    assert (spec.layout, spec.c, spec.h, spec.w, spec.batching) == ("FORMAT_NHWC", 1, 28, 32, True)
    assert spec.input_shape(8) == [8, 28, 32, 1]
    assert not spec.layout_deduced


def test_layout_deduced_when_config_has_none() -> None:
    spec = images.parse_classifier(*classifier([1, 8, 8], "FORMAT_NONE"))
    assert (spec.layout, spec.layout_deduced) == ("FORMAT_NCHW", True)
    spec = images.parse_classifier(*classifier([224, 224, 3], None))
    assert spec.layout == "FORMAT_NHWC"
    with pytest.raises(images.NotAClassifier, match="expecting FORMAT_NCHW or FORMAT_NHWC"):
        images.parse_classifier(*classifier([3, 4, 3], "FORMAT_NONE"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shape": [16]}, "its input has 1 dimensions"),
        ({"shape": [4, 8, 8]}, "its input has 4 channels"),
        ({"shape": [3, -1, -1]}, "variable size"),
        ({"shape": [3, 8, 8], "output_datatype": "INT32"}, "its output type is INT32"),
        ({"shape": [3, 8, 8], "output_shape": [10, 10]}, "is not a vector"),
        ({"shape": [3, 8, 8], "datatype": "BYTES"}, "its input type is BYTES"),
    ],
)
def test_not_a_classifier_says_what_was_expected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(images.NotAClassifier) as caught:
        images.parse_classifier(*classifier(**kwargs))
    text = str(caught.value)
    assert message in text
    assert "one input of 3 dims" in text and "1 or 3 channels" in text and "--input" in text


def test_output_vector_allows_ones_and_batch_checks() -> None:
    images.parse_classifier(*classifier([3, 8, 8], output_shape=[1, 10, 1]))
    metadata, config = classifier([3, 8, 8])
    metadata["inputs"].append(dict(metadata["inputs"][0], name="other"))
    with pytest.raises(images.NotAClassifier, match="it has 2 inputs"):
        images.parse_classifier(metadata, config)
    with pytest.raises(images.NotAClassifier, match="batching not supported for model 'm'"):
        images.parse_classifier(*classifier([3, 8, 8]), batch_size=2)
    with pytest.raises(images.NotAClassifier, match="expecting batch size <= 4"):
        images.parse_classifier(*classifier([3, 8, 8], max_batch_size=4), batch_size=5)


def reference_preprocess(image: Image.Image, c: int, h: int, w: int, scaling: str, nchw: bool) -> Any:
    """image_client.py's steps written out plainly, for comparison."""
    sample = image.convert("L" if c == 1 else "RGB").resize((w, h), Image.Resampling.BILINEAR)
    array = np.array(sample).astype(np.float32)
    if array.ndim == 2:
        array = array[:, :, None]
    if scaling == "INCEPTION":
        array = array / 127.5 - 1
    elif scaling == "VGG":
        array = array - (np.array([128], np.float32) if c == 1 else np.array([123, 117, 104], np.float32))
    return array.transpose(2, 0, 1) if nchw else array


@pytest.mark.parametrize("scaling", images.SCALINGS)
@pytest.mark.parametrize(("shape", "fmt"), [([3, 20, 30], "FORMAT_NCHW"), ([20, 30, 1], "FORMAT_NHWC")])
def test_preprocess_matches_image_client(scaling: str, shape: list[int], fmt: str) -> None:
    rng = np.random.default_rng(1)
    picture = Image.fromarray(rng.integers(0, 256, (50, 70, 3), dtype=np.uint8))
    spec = images.parse_classifier(*classifier(shape, fmt))
    array = images.preprocess(picture, spec, scaling)
    expected = reference_preprocess(picture, spec.c, spec.h, spec.w, scaling, fmt == "FORMAT_NCHW")
    assert array.dtype == np.float32 and array.shape == tuple(shape)
    np.testing.assert_array_equal(array, expected)
    if scaling == "INCEPTION":
        assert array.min() >= -1.0 and array.max() <= 1.0


def test_preprocess_keeps_integer_types() -> None:
    picture = Image.new("RGB", (4, 4), (10, 20, 30))
    spec = images.parse_classifier(*classifier([4, 4, 3], "FORMAT_NHWC", datatype="UINT8"))
    array = images.preprocess(picture, spec)
    assert array.dtype == np.uint8 and array[0, 0].tolist() == [10, 20, 30]


@pytest.mark.parametrize(
    ("count", "batch", "plan"),
    [
        (5, 2, [[0, 1], [2, 3], [4, 0]]),
        (4, 2, [[0, 1], [2, 3]]),
        (1, 3, [[0, 0, 0]]),
        (2, 5, [[0, 1, 0, 1, 0]]),
        (3, 1, [[0], [1], [2]]),
    ],
)
def test_batch_plan_wraps_like_image_client(count: int, batch: int, plan: list[list[int]]) -> None:
    assert images.batch_plan(count, batch) == plan


def test_output_lines() -> None:
    assert images.class_lines(b"15.346230:504:COFFEE MUG") == "    15.346230 (504) = COFFEE MUG"
    assert images.class_lines(b"0.5:3") == "    0.5 (3)"
    rows = images.result_rows(np.array([[b"1.000000:1:one"], [b"2.000000:2:two"]], dtype=object), 2, True)
    text = images.request_text(0, 2, ["a.png", "b.png"], rows)
    assert text.splitlines() == [
        "Request 0, batch size 2",
        "Image 'a.png':",
        "    1.000000 (1) = one",
        "Image 'b.png':",
        "    2.000000 (2) = two",
    ]
    with pytest.raises(ValueError, match="expected 3 results, got 2"):
        images.result_rows(np.array([[b"1:1"], [b"2:2"]], dtype=object), 3, True)
    assert images.parse_class(b"0.25:7:a:b") == {"score": 0.25, "index": 7, "label": "a:b"}


def test_files_and_bad_images(tmp_path: Path) -> None:
    for name in ("b.png", "a.png"):
        Image.new("L", (2, 2)).save(tmp_path / name)
    (tmp_path / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "sub").mkdir()
    assert images.image_files([str(tmp_path)]) == [str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    with pytest.raises(images.ImageError, match="failed to find"):
        images.image_files([str(tmp_path / "missing.png")])
    (tmp_path / "fake.jpg").write_text("hello")
    with pytest.raises(images.ImageError, match="is not an image"):
        images.load_image(tmp_path / "fake.jpg")
    assert images.load_image(tmp_path / "a.png").size == (2, 2)
