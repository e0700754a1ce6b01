"""The files one ONNX model is made of: the graph, and the external data files its tensors name.

MLflow's ONNX flavour saves every tensor over 1 KiB to a data file beside model.onnx (a UUID name), so
copying model.onnx alone would lose the weights of all but toy models.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tcli.errors import CliError


def _tensors(graph: Any) -> Iterator[Any]:
    """Initializers and tensor attributes, through subgraphs (If, Loop, Scan bodies) too."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)


def external_data_files(model_file: Path) -> list[str]:
    """Paths, relative to the model's folder, of the data files `model_file` reads its tensors from."""
    try:
        import onnx
    except ImportError:
        raise CliError("reading an ONNX flavour needs the onnx package: pip install onnx") from None
    model = onnx.load(str(model_file), load_external_data=False)
    locations = {
        entry.value
        for tensor in _tensors(model.graph)
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }
    outside = [path for path in locations if Path(path).is_absolute() or ".." in Path(path).parts]
    if outside:  # a data file outside the model's folder would not travel with it
        raise CliError(f"{model_file.name} reads tensors from outside its folder: {', '.join(outside)}")
    return sorted(locations)
