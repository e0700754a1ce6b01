"""Write the repository entry for a downloaded MLflow model.

An ONNX flavour is served by onnxruntime: model.onnx (and its external data) in the version folder,
the config derived from the file by server/config/scaffold.py. Any other model with the
python_function flavour is served by the python backend: `triton_model.py` as model.py, the MLmodel
folder copied beside it, tensors from the model's signature.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.config import scaffold as sc
from server.config.write import to_pbtxt
from tcli.errors import CliError
from tcli.mlflow_import.fetch import FetchedModel
from tcli.mlflow_import.onnx_files import external_data_files
from tcli.mlflow_import.signature import pyfunc_tensors

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

RUNTIME = Path(__file__).with_name("triton_model.py")
MODEL_FOLDER = "mlflow_model"  # where triton_model.py looks for the copied MLmodel folder


@dataclass(frozen=True)
class WrittenEntry:
    flavour: str  # the MLflow flavour served: "onnx" or "python_function"
    folder: Path  # <repository>/<name>
    version: int
    files: tuple[Path, ...]
    config: ModelConfig


def write_entry(
    model: FetchedModel, repository: Path, options: sc.ScaffoldOptions, version: int, *, force: bool
) -> WrittenEntry:
    if "onnx" in model.flavors:
        graph = model.folder / str(model.flavors["onnx"].get("data") or "model.onnx")
        config = sc.config_for_onnx(graph, options)
        files = {"model.onnx": graph}
        files |= {name: graph.parent / name for name in external_data_files(graph)}
        return _write(repository, config, version, files, "onnx", force=force)
    if "python_function" in model.flavors:
        if model.signature is None:
            raise CliError(
                f"{model.uri.text} has no signature, so its inputs and outputs are unknown: log it with "
                "one, e.g. mlflow.pyfunc.log_model(..., signature=infer_signature(X, model.predict(X)))"
            )
        tensors = pyfunc_tensors(model.signature, options.max_batch_size)
        options = dataclasses.replace(
            options, max_batch_size=tensors.max_batch_size, inputs=tensors.inputs, outputs=tensors.outputs
        )
        config = sc.config_for_python(options)
        files = {"model.py": RUNTIME, MODEL_FOLDER: model.folder}
        return _write(repository, config, version, files, "python_function", force=force)
    flavours = ", ".join(sorted(model.flavors)) or "none"
    raise CliError(
        f"{model.uri.text} has neither the onnx nor the python_function flavour (it has: {flavours}): "
        "log it with mlflow.onnx or as a pyfunc model"
    )


def _write(
    repository: Path, config: ModelConfig, version: int, files: dict[str, Path], flavour: str, *, force: bool
) -> WrittenEntry:
    """config.pbtxt and <version>/ with `files` (target name -> source); an existing version, or a
    config that would change, is replaced only with force."""
    folder = repository / config.name
    target = folder / str(version)
    config_path = folder / "config.pbtxt"
    text = to_pbtxt(config)
    if not force:
        if target.exists():
            raise CliError(f"{target} already exists: pass --force to replace it, or --version for another")
        if config_path.exists() and config_path.read_text(encoding="utf-8") != text:
            raise CliError(
                f"{config_path} exists and the imported model needs a different config: pass --force to "
                "overwrite it, or --name for another model"
            )
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    config_path.write_text(text, encoding="utf-8")
    written = [config_path]
    for name, source in files.items():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination)
        else:
            shutil.copyfile(source, destination)
        written.append(destination)
    return WrittenEntry(flavour, folder, version, tuple(written), config)
