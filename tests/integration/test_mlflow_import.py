"""MLflow as the source of models, against a real `mlflow server` (sqlite store, artifacts served from a
local folder) started once for the module.

Models are built in code, logged and registered with mlflow's own API, imported with the real `tcli
repo import` console script, served by a real tcli server, and asked through tritonclient: every answer
must equal mlflow's own prediction for the same rows. The deploy/mlflow example, which pulls its model
from the tracking server when it loads, is served with `tcli serve`. Errors are one line each.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mlflow")
pytest.importorskip("onnx")

import mlflow
import pandas as pd
import tritonclient.http as httpclient
from mlflow.models import infer_signature

from server.repository.manager import ControlMode
from tests.cli.conftest import ROOT, run_tcli
from tests.integration.conftest import start_server
from tests.integration.serve_process import ServeProcess
from tests.mlflow_server import mlflow_server

# mlflow's hints while logging (add type hints, give an input example) are about the toy models here
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DEPLOY_REPOSITORY = ROOT / "deploy" / "mlflow" / "model_repository"
RUNTIME = ROOT / "tcli" / "mlflow_import" / "triton_model.py"

# a pyfunc model saved as code (MLflow's "models from code"): nothing pickled, nothing to import later
HOUSE_PRICE_CODE = """
import mlflow
import pandas as pd


class HousePrice(mlflow.pyfunc.PythonModel):
    def load_context(self, context):
        self.per_m2 = context.model_config["per_m2"]  # one value per registered version

    def predict(self, context, model_input, params=None):
        price = model_input["area"] * self.per_m2 + model_input["rooms"] * 10000 + model_input["city"].str.len()
        return pd.DataFrame({"price": price.astype("float64")})


mlflow.models.set_model(HousePrice())
"""
ROW_SUMS_CODE = """
import mlflow
import numpy as np


class RowSums(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return np.asarray(model_input, dtype=np.float32).sum(axis=1) * 2


mlflow.models.set_model(RowSums())
"""
HOUSES = pd.DataFrame(
    {
        "rooms": np.array([3, 1, 5], np.int64),
        "area": np.array([82.5, 30.0, 140.25]),
        "city": ["Lyon", "Oslo", "Zürich"],
    }
)


@dataclass
class Registry:
    tracking_uri: str
    folder: Path
    run_id: str  # the run that logged every model


def onnx_affine(seed: int) -> Any:
    """Y = X @ W + B with W of 32x16 floats: 2 KiB, so MLflow keeps it in an external data file."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = numpy_helper.from_array(rng.normal(size=(32, 16)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.normal(size=16).astype(np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "B"], ["Y"])],
        "affine",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 16])],
        [weights, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what this onnxruntime reads
    return model


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """The server, holding: affine_onnx versions 1 and 2 (alias champion on 2), house_price version 1
    (alias production) and no_signature version 1."""
    folder = tmp_path_factory.mktemp("mlflow")
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    with mlflow_server(folder) as url:
        mlflow.set_tracking_uri(url)
        try:
            yield Registry(url, folder, _register_models(folder))
        finally:
            mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]  # None forgets it


# given, not inferred: mlflow infers requirements by loading the model in a subprocess, 5-8 s a model
REQUIREMENTS = ["mlflow"]


def _register_models(folder: Path) -> str:
    (folder / "house_price.py").write_text(HOUSE_PRICE_CODE)
    client = mlflow.MlflowClient()
    with mlflow.start_run() as run:
        for seed in (1, 2):
            mlflow.onnx.log_model(
                onnx_affine(seed),
                name=f"affine_{seed}",
                registered_model_name="affine_onnx",
                pip_requirements=REQUIREMENTS,
            )
        client.set_registered_model_alias("affine_onnx", "champion", "2")
        log_house_price(folder, per_m2=1500.0)
        client.set_registered_model_alias("house_price", "production", "1")
        mlflow.pyfunc.log_model(
            name="no_signature",
            python_model=str(folder / "house_price.py"),
            registered_model_name="no_signature",
            pip_requirements=REQUIREMENTS,
        )
    return str(run.info.run_id)


def log_house_price(folder: Path, per_m2: float) -> None:
    """A new version of the registered model house_price."""
    mlflow.pyfunc.log_model(
        name="house_price",
        python_model=str(folder / "house_price.py"),
        model_config={"per_m2": per_m2},
        signature=infer_signature(HOUSES, pd.DataFrame({"price": [0.0]})),
        registered_model_name="house_price",
        pip_requirements=REQUIREMENTS,
    )


@pytest.fixture(scope="module")
def imported(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A repository made by `tcli repo import` only: the ONNX champion, the pyfunc model from the
    registry, and a tensor-based pyfunc model from a local folder; and the JSON each import printed."""
    repository = tmp_path_factory.mktemp("imported") / "models"
    local = registry.folder / "row_sums"
    (registry.folder / "row_sums.py").write_text(ROW_SUMS_CODE)
    rows = np.ones((2, 3), np.float32)
    mlflow.pyfunc.save_model(
        local,
        python_model=str(registry.folder / "row_sums.py"),
        signature=infer_signature(rows, rows[:, 0]),
        pip_requirements=REQUIREMENTS,
    )
    uris = (
        "models:/affine_onnx@champion",
        "models:/house_price/1",
        str(local),
        f"runs:/{registry.run_id}/affine_1",
    )
    with ThreadPoolExecutor(len(uris)) as pool:  # separate models: the imports may run side by side
        results = pool.map(
            lambda uri: _tcli_import(
                registry, uri, "--repo", str(repository), "--max-batch-size", "8", "--format", "json"
            ),
            uris,
        )
    outputs = {}
    for uri, result in zip(uris, results, strict=True):
        assert result.returncode == 0, result.stdout + result.stderr
        outputs[uri] = json.loads(result.stdout)
    return repository, outputs


def _tcli_import(registry: Registry, *args: str, tracking_uri: str | None = None) -> Any:
    return run_tcli("repo", "import", *args, "--tracking-uri", tracking_uri or registry.tracking_uri)


def test_imports_write_what_they_print(imported: tuple[Path, dict[str, Any]]) -> None:
    repository, outputs = imported
    onnx, pyfunc, local, from_run = outputs.values()
    # the alias names registry version 2, which becomes the version folder
    assert (onnx["flavour"], onnx["model"], onnx["version"], onnx["backend"]) == (
        "onnx",
        "affine_onnx",
        2,
        "onnxruntime_onnx",
    )
    data_files = [p for p in (repository / "affine_onnx" / "2").iterdir() if p.name != "model.onnx"]
    assert len(data_files) == 1, "the external weights file travels with model.onnx"
    assert [t["data_type"] for t in pyfunc["tensors"]] == [
        "TYPE_INT64",
        "TYPE_FP64",
        "TYPE_STRING",
        "TYPE_FP64",
    ]
    assert [t["name"] for t in pyfunc["tensors"]] == ["rooms", "area", "city", "price"]
    assert (pyfunc["model"], pyfunc["version"], pyfunc["status"]) == ("house_price", 1, "ok")
    assert (repository / "house_price" / "1" / "model.py").read_text() == RUNTIME.read_text()
    assert (repository / "house_price" / "1" / "mlflow_model" / "MLmodel").is_file()
    assert (local["model"], local["version"], local["tensors"][0]["dims"]) == ("row_sums", 1, [3])
    assert (from_run["model"], from_run["version"], from_run["flavour"]) == ("affine_1", 1, "onnx")
    for output in outputs.values():
        assert all(Path(f).exists() for f in output["files"])
    assert run_tcli("repo", "validate", str(repository)).returncode == 0


def test_served_answers_equal_mlflow_predictions(imported: tuple[Path, dict[str, Any]]) -> None:
    repository, _ = imported
    server = start_server(repository, ControlMode.NONE)
    try:
        client = httpclient.InferenceServerClient(server.url)

        x = np.random.default_rng(7).normal(size=(5, 32)).astype(np.float32)
        expected = mlflow.pyfunc.load_model("models:/affine_onnx@champion").predict(x)
        assert np.allclose(_infer(client, "affine_onnx", {"X": x})["Y"], expected["Y"], atol=1e-5)

        houses = {
            "rooms": HOUSES["rooms"].to_numpy().reshape(-1, 1),
            "area": HOUSES["area"].to_numpy().reshape(-1, 1),
            "city": np.array([[c.encode()] for c in HOUSES["city"]], dtype=object),
        }
        expected = mlflow.pyfunc.load_model("models:/house_price/1").predict(HOUSES)
        answer = _infer(client, "house_price", houses)["price"]
        assert answer.shape == (3, 1)
        assert np.array_equal(answer[:, 0], expected["price"].to_numpy())

        rows = np.arange(12, dtype=np.float32).reshape(4, 3)
        answer = _infer(client, "row_sums", {"INPUT0": rows})["OUTPUT0"]
        assert np.array_equal(answer[:, 0], rows.sum(axis=1) * 2)
    finally:
        server.stop()


def _infer(client: Any, model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    tensors = []
    for name, array in inputs.items():
        wire = "BYTES" if array.dtype == np.object_ else httpclient.np_to_triton_dtype(array.dtype)
        tensor = httpclient.InferInput(name, list(array.shape), wire)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(model, tensors)
    return {output["name"]: result.as_numpy(output["name"]) for output in result.get_response()["outputs"]}


def test_deploy_example_pulls_its_model_when_it_loads(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/mlflow: no weights in the repository; `tcli serve` with MLFLOW_TRACKING_URI loads
    models:/house_price@production from the server, and the alias's new version when unloaded and
    loaded again."""
    assert (DEPLOY_REPOSITORY / "house_price" / "1" / "model.py").read_text() == RUNTIME.read_text()
    repository = tmp_path / "models"
    shutil.copytree(DEPLOY_REPOSITORY, repository)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", registry.tracking_uri)
    houses = {
        "rooms": np.array([[2], [4]], np.int64),
        "area": np.array([[55.0], [101.5]]),
        "city": np.array([[b"Rome"], [b"Bergen"]], dtype=object),
    }
    frame = pd.DataFrame({"rooms": [2, 4], "area": [55.0, 101.5], "city": ["Rome", "Bergen"]})
    served = ServeProcess(
        "--model-repository",
        str(repository),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "house_price",
    )
    try:
        client = httpclient.InferenceServerClient(served.http_url)
        for version in ("1", "2"):
            expected = mlflow.pyfunc.load_model(f"models:/house_price/{version}").predict(frame)
            answer = _infer(client, "house_price", houses)["price"][:, 0]
            assert np.array_equal(answer, expected["price"].to_numpy()), version
            if version == "1":  # a new version takes the alias; unload and load pull it
                log_house_price(registry.folder, per_m2=2000.0)
                mlflow.MlflowClient().set_registered_model_alias("house_price", "production", "2")
                # a load of unchanged files leaves the model as it is, as in Triton
                client.load_model("house_price")
                assert np.array_equal(_infer(client, "house_price", houses)["price"][:, 0], answer)
                client.unload_model("house_price")
                client.load_model("house_price")
        client.close()  # an open connection holds a stopping server up to its exit timeout, as Triton's
    finally:
        assert served.stop() == 0, served.output()


def _assert_one_line_error(result: Any, *fragments: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    for fragment in fragments:
        assert fragment in line, line


def test_unknown_model_name(registry: Registry, tmp_path: Path) -> None:
    result = _tcli_import(registry, "models:/no_such_model/1", "--repo", str(tmp_path))
    _assert_one_line_error(result, "no_such_model", "not found")
    assert not any(tmp_path.iterdir())


def test_model_without_signature_says_to_log_one(registry: Registry, tmp_path: Path) -> None:
    result = _tcli_import(registry, "models:/no_signature/1", "--repo", str(tmp_path))
    _assert_one_line_error(result, "has no signature", "log it with one")


def test_model_with_neither_flavour(registry: Registry, tmp_path: Path) -> None:
    folder = tmp_path / "custom_model"
    folder.mkdir()
    (folder / "MLmodel").write_text("flavors:\n  my_flavour:\n    data: weights.bin\n")
    result = _tcli_import(registry, str(folder), "--repo", str(tmp_path / "repo"))
    _assert_one_line_error(result, "neither the onnx nor the python_function flavour", "my_flavour")
    (folder / "MLmodel").unlink()
    result = _tcli_import(registry, str(folder), "--repo", str(tmp_path / "repo"))
    _assert_one_line_error(result, "is not an MLflow model: it has no MLmodel file")


def test_unreachable_tracking_server_fails_within_the_timeout(registry: Registry, tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = _tcli_import(
            registry, "models:/house_price/1", "--repo", str(tmp_path), "--timeout", "2", tracking_uri=url
        )
        assert time.monotonic() - started < 20
    _assert_one_line_error(result, url, "did not answer within 2 s")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening: refused
        result = _tcli_import(registry, "models:/house_price/1", "--repo", str(tmp_path), tracking_uri=url)
    _assert_one_line_error(result, f"cannot reach the MLflow tracking server at {url}")


def test_existing_version_needs_force(registry: Registry, imported: tuple[Path, dict[str, Any]]) -> None:
    repository, _ = imported
    again = _tcli_import(registry, "models:/house_price/1", "--repo", str(repository))
    _assert_one_line_error(again, "house_price/1 already exists", "--force")


def test_help_does_not_import_mlflow() -> None:
    done = run_tcli("repo", "import", "--help")
    assert done.returncode == 0 and "MODEL_URI" in done.stdout
    probe = textwrap.dedent(
        """
        import sys
        from typer.testing import CliRunner
        from tcli.main import app
        CliRunner().invoke(app, ['repo', 'import', '--help'])
        print('mlflow' in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
