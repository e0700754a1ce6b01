"""`tcli infer` as a user runs it against a real tcli server (HTTP and gRPC on port 0): image_client's
classification of digit pictures and of a 224x224 photo, its output format to the character, the
same lines against the real Triton 2.51, the generic mode on `simple`, and one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from PIL import Image

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.cli.conftest import ROOT, run_tcli
from tests.reference import RealTriton, require_reference_triton

MODELS = ROOT / "model_repository"
DIGIT_COUNT = 50

try:
    from server.frontends.grpc import serve_grpc  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

    GRPC_SKIP = ""
except ImportError as exc:
    GRPC_SKIP = f"tcli's gRPC front end is not available ({exc})"

# A python-backend image classifier with known answers, servable by tcli and by the real Triton (which
# has only the python backend): densenet_onnx's interface, fixed and distinct scores for every class.
CLASSIFIER_CONFIG = """
name: "fixed_classifier"
backend: "python"
max_batch_size: 0
input [ { name: "data_0", data_type: TYPE_FP32, format: FORMAT_NCHW, dims: [ 3, 224, 224 ] } ]
output [ { name: "fc6_1", data_type: TYPE_FP32, dims: [ 1000 ], label_filename: "densenet_labels.txt" } ]
instance_group [ { kind: KIND_CPU } ]
"""
CLASSIFIER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # class i scores ((i * 7919) % 1000) / 64: distinct, exact in FP32; the top class is 321 (15.609375)
        scores = ((np.arange(1000) * 7919) % 1000).astype(np.float32) / 64
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "data_0").as_numpy()
            assert image.shape == (3, 224, 224), image.shape
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("fc6_1", scores)]))
        return responses
"""


def write_classifier(repo: Path) -> None:
    model = repo / "fixed_classifier"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CLASSIFIER_CONFIG)
    (model / "1" / "model.py").write_text(CLASSIFIER_MODEL)
    shutil.copy(MODELS / "densenet_onnx" / "densenet_labels.txt", model)


def expected_classifier_lines(image: str, count: int) -> list[str]:
    labels = (MODELS / "densenet_onnx" / "densenet_labels.txt").read_text().splitlines()
    scores = ((np.arange(1000) * 7919) % 1000).astype(np.float32) / 64
    top = np.argsort(-scores)[:count]
    return [
        "Request 0, batch size 1",
        f"Image '{image}':",
        *(f"    {float(scores[i]):.6f} ({i}) = {labels[i]}" for i in top),
    ]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("infer_repo")
    for name in ("simple", "digits_onnx", "densenet_onnx", "repeat_int32"):
        shutil.copytree(MODELS / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    write_classifier(repo)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    settings = ServerSettings(
        [repo],
        ControlMode.NONE,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        allow_metrics=False,
        allow_grpc=not GRPC_SKIP,
    )
    with Server(settings) as running:
        yield running


def url(server: Server, protocol: str) -> list[str]:
    if protocol == "grpc":
        if GRPC_SKIP:
            pytest.skip(GRPC_SKIP)
        return ["-u", f"localhost:{server.grpc_port}", "-i", "grpc"]
    return ["-u", f"localhost:{server.http_port}"]


def infer(
    server: Server, *args: str, protocol: str = "http", subprocess: bool = False
) -> tuple[int, str, str]:
    """`tcli infer ...`: by default through the console script's entry point in this process (the
    machines here are small and each `tcli` process pays for its imports); with subprocess=True as a
    real `tcli` process."""
    argv = ["infer", *args, *url(server, protocol)]
    if subprocess:
        done = run_tcli(*argv)
        return done.returncode, done.stdout, done.stderr
    return run_in_process(*argv)


def run_in_process(*argv: str) -> tuple[int, str, str]:
    from tcli.main import run

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with (
        mock.patch.object(sys, "argv", ["tcli", *argv]),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            run()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def digit_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's held-out digits (the split digits_onnx was trained without), drawn as 32x32 grey
    PNGs with bright ink, as a user would have them; the true digit is in each file name."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    _, images, _, labels = train_test_split(
        digits.images, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    folder = tmp_path_factory.mktemp("digits")
    for index in range(DIGIT_COUNT):
        pixels = np.round(images[index] * 255 / 16).astype(np.uint8)
        picture = Image.fromarray(pixels, "L").resize((32, 32), Image.Resampling.NEAREST)
        picture.save(folder / f"digit_{index:03d}_is_{labels[index]}.png")
    return folder


def photo(folder: Path, name: str = "mug.jpg") -> Path:
    path = folder / name
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)).save(path)
    return path


def digit_accuracy(out: str, batch_size: int) -> float:
    """Parse image_client's text: one `Request i, batch size b` block per request, an `Image '...':`
    line per picture, then its top class. Returns the share of pictures classified right."""
    lines = out.splitlines()
    requests = [line for line in lines if line.startswith("Request ")]
    expected_requests = -(-DIGIT_COUNT // batch_size)
    assert requests == [f"Request {i}, batch size {batch_size}" for i in range(expected_requests)]
    right = seen = 0
    for index, line in enumerate(lines):
        match = re.fullmatch(r"Image '.*digit_(\d{3})_is_(\d)\.png':", line)
        if match:
            top = re.fullmatch(r"    \d+\.\d{6} \((\d)\) = (\d)", lines[index + 1])
            assert top, lines[index + 1]
            assert top.group(1) == top.group(2)  # labels file: line i is the digit i
            seen += 1
            right += top.group(2) == match.group(2)
    # the last batch is filled by starting over from the first pictures
    assert seen == expected_requests * batch_size
    return right / seen


# image_client mode --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("protocol", "extra", "subprocess"),
    [
        ("http", ["-b", "8"], True),
        ("http", ["-a"], False),
        ("grpc", ["-b", "4", "-a"], True),
        ("grpc", [], False),
        ("grpc", ["-b", "2", "--streaming"], False),
    ],
)
def test_digits_are_recognised(
    server: Server, digit_folder: Path, protocol: str, extra: list[str], subprocess: bool
) -> None:
    code, out, err = infer(
        server, "-m", "digits_onnx", str(digit_folder), *extra, protocol=protocol, subprocess=subprocess
    )
    assert code == 0, err
    batch_size = int(extra[extra.index("-b") + 1]) if "-b" in extra else 1
    assert digit_accuracy(out, batch_size) >= 0.9


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classifier_output_is_image_clients_to_the_character(
    server: Server, tmp_path: Path, protocol: str
) -> None:
    image = photo(tmp_path)
    code, out, err = infer(
        server,
        "-m",
        "fixed_classifier",
        str(image),
        "-c",
        "3",
        "-s",
        "INCEPTION",
        protocol=protocol,
        subprocess=protocol == "http",
    )
    assert code == 0, err
    assert out.splitlines() == expected_classifier_lines(str(image), 3)
    assert out.splitlines()[2:] == [
        "    15.609375 (321) = ADMIRAL",
        "    15.593750 (642) = MARIMBA",
        "    15.578125 (963) = PIZZA",
    ]


def test_densenet_onnx_three_classes(server: Server, tmp_path: Path) -> None:
    image = photo(tmp_path)
    code, out, err = infer(server, "-m", "densenet_onnx", str(image), "-c", "3", "-s", "INCEPTION")
    assert code == 0, err
    labels = (MODELS / "densenet_onnx" / "densenet_labels.txt").read_text().splitlines()
    head, name, *classes = out.splitlines()
    assert (head, name) == ("Request 0, batch size 1", f"Image '{image}':")
    assert len(classes) == 3
    scores = []
    for line in classes:
        match = re.fullmatch(r"    (\d+\.\d{6}) \((\d+)\) = (.+)", line)
        assert match, line
        assert match.group(3) == labels[int(match.group(2))]
        scores.append(float(match.group(1)))
    assert scores == sorted(scores, reverse=True)


def test_json_report_and_batch_padding(server: Server, digit_folder: Path, tmp_path: Path) -> None:
    few = tmp_path / "few"
    few.mkdir()
    for path in sorted(digit_folder.iterdir())[:3]:
        shutil.copy(path, few)
    (few / ".hidden").write_text("not an image, and hidden: left out")
    code, out, err = infer(server, "-m", "digits_onnx", str(few), "-b", "2", "-c", "2", "--format", "json")
    assert code == 0, err
    report = json.loads(out)
    names = [[Path(item["image"]).name for item in request["images"]] for request in report]
    files = sorted(p.name for p in few.glob("digit_*"))
    assert names == [files[0:2], [files[2], files[0]]]  # last batch filled from the start
    classes = report[0]["images"][0]["classes"]
    assert len(classes) == 2 and classes[0]["score"] >= classes[1]["score"]
    assert classes[0]["label"] == str(classes[0]["index"])


@pytest.mark.reference
def test_same_lines_as_against_real_triton(server: Server, repo: Path, tmp_path: Path) -> None:
    binary = require_reference_triton()
    triton_repo = tmp_path / "repo"
    write_classifier(triton_repo)
    image = photo(tmp_path)
    args = ["infer", "-m", "fixed_classifier", str(image), "-c", "3", "-s", "INCEPTION"]
    ours = run_in_process(*args, "-u", f"localhost:{server.http_port}")
    with RealTriton(binary, triton_repo) as triton:
        theirs = run_in_process(*args, "-u", triton.http_address)
        theirs_grpc = run_in_process(*args, "-u", triton.grpc_address, "-i", "grpc")
    assert theirs[0] == 0, theirs[2]
    assert theirs_grpc[0] == 0, theirs_grpc[2]
    assert ours[0] == 0, ours[2]
    assert ours[1] == theirs[1] == theirs_grpc[1]
    assert ours[1].splitlines() == expected_classifier_lines(str(image), 3)


# generic mode -------------------------------------------------------------------------------------
def test_generic_literals_table_and_json(server: Server) -> None:
    a = ",".join(str(i) for i in range(16))
    code, out, err = infer(
        server, "-m", "simple", "--input", f"INPUT0={a}", "--input", "INPUT1=" + ",".join(["2"] * 16)
    )
    assert code == 0, err
    assert "OUTPUT0" in out and "OUTPUT1" in out and "INT32" in out and "[1, 16]" in out
    assert "17" in out and "-2" in out
    code, out, err = infer(
        server,
        "-m",
        "simple",
        "--input",
        "INPUT0=[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]]",
        "--input",
        "INPUT1=" + ",".join(["1"] * 16),
        "--shape",
        "INPUT1:1,16",
        "--format",
        "json",
        protocol="grpc" if not GRPC_SKIP else "http",
    )
    assert code == 0, err
    answer = json.loads(out)
    outputs = {o["name"]: o for o in answer["outputs"]}
    assert answer["model_name"] == "simple"
    assert outputs["OUTPUT0"] == {
        "name": "OUTPUT0",
        "datatype": "INT32",
        "shape": [1, 16],
        "data": [list(range(2, 18))],
    }
    assert outputs["OUTPUT1"]["data"] == [list(range(0, 16))]


def test_generic_npy_and_json_files_to_output_dir(server: Server, tmp_path: Path) -> None:
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    np.save(tmp_path / "a.npy", first)
    (tmp_path / "b.json").write_text(json.dumps({"content": [3] * 32, "shape": [2, 16]}))
    out_dir = tmp_path / "out"
    code, out, err = infer(
        server,
        "-m",
        "simple",
        "--input",
        f"INPUT0=@{tmp_path / 'a.npy'}",
        "--input",
        f"INPUT1=@{tmp_path / 'b.json'}",
        "--output-dir",
        str(out_dir),
    )
    assert code == 0, err
    assert f"OUTPUT0: INT32 [2, 16] -> {out_dir / 'OUTPUT0.npy'}" in out
    np.testing.assert_array_equal(np.load(out_dir / "OUTPUT0.npy"), first + 3)
    np.testing.assert_array_equal(np.load(out_dir / "OUTPUT1.npy"), first - 3)
    assert np.load(out_dir / "OUTPUT1.npy").dtype == np.int32
    code, _, err = infer(
        server,
        "-m",
        "simple",
        "--input",
        f"INPUT0=@{tmp_path / 'a.npy'}",
        "--input",
        f"INPUT1=@{tmp_path / 'b.json'}",
        "--output-dir",
        str(out_dir),
        "--format",
        "json",
    )
    assert code == 0, err
    assert json.loads((out_dir / "OUTPUT1.json").read_text())["data"] == (first - 3).tolist()


# errors -------------------------------------------------------------------------------------------
def assert_one_line_error(done: tuple[int, str, str], *fragments: str) -> None:
    code, _, err = done
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_errors_are_one_line(server: Server, tmp_path: Path) -> None:
    image = photo(tmp_path)
    text = tmp_path / "notes.jpg"
    text.write_text("this is not a picture")
    assert_one_line_error(
        infer(server, "-m", "nope", str(image), subprocess=True), "unknown model", "tcli model list"
    )
    assert_one_line_error(
        run_in_process("infer", "-m", "densenet_onnx", str(image), "-u", "localhost:1"), "cannot reach"
    )
    assert_one_line_error(infer(server, "-m", "densenet_onnx", str(text)), "is not an image", str(text))
    assert_one_line_error(
        infer(server, "-m", "densenet_onnx", str(tmp_path / "missing.jpg")), "failed to find"
    )
    assert_one_line_error(
        infer(server, "-m", "simple", str(image)),
        "does not look like an image classifier",
        "it has 2 inputs",
        "one input of 3 dims",
        "1 or 3 channels",
        "--input",
    )
    assert_one_line_error(
        infer(server, "-m", "densenet_onnx", str(image), "-b", "2"), "batching not supported"
    )
    assert_one_line_error(infer(server, "-m", "digits_onnx", str(image), "-b", "65"), "batch size <= 64")
    assert_one_line_error(
        infer(server, "-m", "densenet_onnx", str(image), "--streaming"), "only allowed with gRPC"
    )


def test_generic_errors_are_one_line(server: Server, tmp_path: Path) -> None:
    ones = ",".join(["1"] * 16)
    assert_one_line_error(infer(server, "-m", "simple"), "INPUT0 (INT32 [-1, 16])", "--input")
    assert_one_line_error(
        infer(server, "-m", "simple", "--input", "INPUT0=1,2,3", "--input", f"INPUT1={ones}"),
        "shape [1, 3] does not match the model's [-1, 16]",
    )
    assert_one_line_error(
        infer(
            server,
            "-m",
            "simple",
            "--input",
            f"INPUT0={ones}",
            "--input",
            f"INPUT1={ones}",
            "--shape",
            "INPUT0:4,4",
        ),
        "does not match",
    )
    assert_one_line_error(
        infer(server, "-m", "simple", "--input", f"INPUT0={ones}"), "also needs INPUT1 (INT32 [-1, 16])"
    )
    assert_one_line_error(
        infer(server, "-m", "simple", "--input", f"INPUT0={ones}", "--input", f"NOPE={ones}"),
        "has no input 'NOPE'",
        "INPUT0, INPUT1",
    )
    assert_one_line_error(
        infer(
            server, "-m", "simple", "--input", "INPUT0=" + ",".join(["1.5"] * 16), "--input", f"INPUT1={ones}"
        ),
        "INT32",
    )
    assert_one_line_error(
        infer(
            server, "-m", "simple", "--input", f"INPUT0=@{tmp_path / 'no.npy'}", "--input", f"INPUT1={ones}"
        ),
        "not found",
    )


def test_streaming_prints_every_response_of_a_decoupled_model(server: Server, tmp_path: Path) -> None:
    args = (
        "-m",
        "repeat_int32",
        "--streaming",
        "--input",
        "IN=7,8,9",
        "--input",
        "DELAY=0,0,0",
        "--input",
        "WAIT=0",
    )
    code, out, err = infer(server, *args, protocol="grpc")
    assert code == 0, err
    titles = re.findall(r"repeat_int32 version 1, response (\d)/3", out)
    assert titles == ["1", "2", "3"]
    assert re.findall(r"│ OUT +│ INT32 +│ \[1\] +│ \[(\d)\] +│", out) == ["7", "8", "9"]

    code, out, err = infer(server, *args, "--format", "json", protocol="grpc")
    assert code == 0, err
    answers = json.loads(out)
    assert [answer["outputs"][0]["data"] for answer in answers] == [[7], [8], [9]]

    code, out, err = infer(server, *args, "--output-dir", str(tmp_path), protocol="grpc")
    assert code == 0, err
    assert [int(np.load(tmp_path / f"OUT.{n}.npy")[0]) for n in (1, 2, 3)] == [7, 8, 9]
