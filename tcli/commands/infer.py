"""`tcli infer`: send inference requests to any Triton-compatible server (tcli's or Triton itself).

With image files or folders it behaves like Triton's image_client: the model's metadata and config
decide layout, size, channels and data type; the pictures are preprocessed as image_client does;
the server classifies (top -c classes) and the answer is printed in image_client's format.
Without images it is a generic client for any model: tensors from literals, .npy or JSON files,
outputs as tables, JSON, or .npy/.json files.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcli.commands.tls_options import current_tls, with_tls
from tcli.errors import CliError
from tcli.help import HelpCommand

if TYPE_CHECKING:
    import numpy as np

    from tcli.client.grpc import GrpcClient
    from tcli.client.http import HttpClient
    from tcli.client.types import InferInput, InferResult, RequestedOutput
    from tcli.images import ClassifierSpec

app = typer.Typer(rich_markup_mode=None)

ASYNC_CONCURRENCY = 20  # image_client's HTTP client concurrency with -a


class Protocol(enum.StrEnum):
    http = "http"
    grpc = "grpc"


class Scaling(enum.StrEnum):
    NONE = "NONE"
    INCEPTION = "INCEPTION"
    VGG = "VGG"


class Format(enum.StrEnum):
    table = "table"
    json = "json"


@app.command(cls=HelpCommand)
@with_tls
def infer(
    model: Annotated[str, typer.Option("-m", "--model-name", help="Name of the model.", show_default=False)],
    images: Annotated[
        list[str] | None,
        typer.Argument(
            help="Image files or folders of images (image_client mode). Leave out for the generic mode.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        str, typer.Option("-x", "--model-version", help="Model version (default: latest).")
    ] = "",
    batch_size: Annotated[
        int, typer.Option("-b", "--batch-size", help="Images per request; a folder is grouped into batches.")
    ] = 1,
    classes: Annotated[
        int | None,
        typer.Option(
            "-c",
            "--classes",
            help="Top classes to report (images: default 1; generic mode: classify every output).",
            show_default=False,
        ),
    ] = None,
    scaling: Annotated[
        Scaling,
        typer.Option(
            "-s",
            "--scaling",
            case_sensitive=False,
            help="Pixel scaling: INCEPTION x/127.5-1, VGG x-mean(123,117,104), NONE as is.",
        ),
    ] = Scaling.NONE,
    url: Annotated[
        str | None,
        typer.Option("-u", "--url", help="Server address (default localhost:8000 for HTTP, :8001 for gRPC)."),
    ] = None,
    protocol: Annotated[
        Protocol, typer.Option("-i", "--protocol", case_sensitive=False, help="http or grpc.")
    ] = Protocol.http,
    async_set: Annotated[
        bool, typer.Option("-a", "--async", help="Send all requests at once, print in request order.")
    ] = False,
    streaming: Annotated[bool, typer.Option("--streaming", help="gRPC streaming API (gRPC only).")] = False,
    input_values: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            help="Generic mode: NAME=@file.npy, NAME=@file.json, NAME=1,2,3 or NAME=[[1,2],[3,4]] (repeatable).",
            show_default=False,
        ),
    ] = None,
    shapes: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="Generic mode: NAME:D1,D2,... shape of an --input (the batch dim may be left out).",
            show_default=False,
        ),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir", help="Generic mode: write each output to DIR/NAME.npy (.json with --format json)."
        ),
    ] = None,
    format: Annotated[
        Format,
        typer.Option(
            "--format", "-f", help="table (images: image_client's text) or json.", case_sensitive=False
        ),
    ] = Format.table,
) -> None:
    """Run inference: classify images like Triton's image_client, or send any tensors to any model.

    Images: `tcli infer -m densenet_onnx mug.jpg -c 3 -s INCEPTION`. Generic:
    `tcli infer -m simple --input INPUT0=@a.npy --input INPUT1=1,2,...,16`.
    """
    if streaming and protocol != Protocol.grpc:
        raise CliError("Streaming is only allowed with gRPC protocol: add -i grpc")
    if batch_size <= 0:
        raise CliError("batch size must be > 0 (-b)")
    if classes is not None and classes <= 0:
        raise CliError("the number of classes must be > 0 (-c)")
    if images and (input_values or shapes):
        raise CliError("give either images (image_client mode) or --input/--shape tensors, not both")
    if images and output_dir is not None:
        raise CliError("--output-dir applies to the generic mode (--input tensors), not to images")

    from tcli.client import connect
    from tcli.client.types import ClientError

    try:
        client = connect(url, protocol.value, tls=current_tls())
    except ClientError as exc:
        raise CliError(exc.message) from None
    with client:
        metadata = _call(client.model_metadata, model, version, what="metadata")
        if images:
            _classify_images(
                client,
                metadata,
                images,
                version=version,
                batch_size=batch_size,
                classes=classes or 1,
                scaling=scaling.value,
                async_set=async_set,
                streaming=streaming,
                as_json=format == Format.json,
            )
            return
        if batch_size != 1:
            raise CliError("-b applies to images; in the generic mode put the batch in the tensor's shape")
        if not input_values:
            raise CliError(_what_to_give(client, metadata, version))
        _generic(
            client,
            metadata,
            input_values,
            shapes or [],
            version=version,
            classes=classes,
            async_set=async_set or streaming,
            streaming=streaming,
            output_dir=output_dir,
            as_json=format == Format.json,
        )


# plumbing -----------------------------------------------------------------------------------------
def _call(function: Callable[..., Any], *args: Any, what: str = "", **kwargs: Any) -> Any:
    from tcli.client.types import ClientError

    try:
        return function(*args, **kwargs)
    except ClientError as exc:
        message = exc.message
        if exc.status in (404, "NOT_FOUND") or "unknown model" in message:
            message += "; `tcli model list` shows the models the server has"
        raise CliError(f"failed to retrieve the {what}: {message}" if what else message) from None


def _send(
    client: HttpClient | GrpcClient,
    model: str,
    version: str,
    requests: list[tuple[list[InferInput], list[RequestedOutput] | None]],
    async_set: bool,
    streaming: bool,
) -> Iterator[InferResult]:
    """Results in request order; request i carries id str(i). Sync: one at a time. Async: up to 20
    in flight from a thread pool. Streaming: the client's gRPC stream, when it has one."""
    from tcli.client.types import ClientError

    def one(index: int) -> InferResult:
        inputs, outputs = requests[index]
        return client.infer(model, inputs, outputs, version=version, request_id=str(index))

    try:
        if streaming:
            yield from _stream(client, model, version, requests)
        elif async_set and len(requests) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(ASYNC_CONCURRENCY, len(requests))) as pool:
                futures = [pool.submit(one, i) for i in range(len(requests))]
                try:
                    for future in futures:
                        yield future.result()
                finally:
                    for future in futures:
                        future.cancel()
        else:
            for index in range(len(requests)):
                yield one(index)
    except ClientError as exc:
        raise CliError(f"inference failed: {exc.message}") from None


def _stream(
    client: HttpClient | GrpcClient,
    model: str,
    version: str,
    requests: list[tuple[list[InferInput], list[RequestedOutput] | None]],
) -> Iterator[InferResult]:
    """gRPC streaming (ModelStreamInfer) through the client library's `stream_infer(model, requests,
    version)`, where requests are (inputs, outputs, request_id) and results come back with their id."""
    stream_infer = getattr(client, "stream_infer", None)
    if stream_infer is None:
        raise CliError(
            "--streaming is not available yet: tcli's gRPC client has no streaming call; use -a (--async)"
        )
    pending = [(inputs, outputs, str(i)) for i, (inputs, outputs) in enumerate(requests)]
    # a decoupled model answers a request with any number of responses (repeat_int32: one per
    # element): every one is kept, in request order, each request's in the order they came
    by_id: dict[str, list[InferResult]] = {}
    for result in stream_infer(model, pending, version):
        by_id.setdefault(result.id, []).append(result)
    for index in range(len(requests)):
        yield from by_id.get(str(index), [])


def _print(text: str) -> None:
    print(text, flush=True)


# image_client mode --------------------------------------------------------------------------------
def _classify_images(
    client: HttpClient | GrpcClient,
    metadata: dict[str, Any],
    paths: list[str],
    *,
    version: str,
    batch_size: int,
    classes: int,
    scaling: str,
    async_set: bool,
    streaming: bool,
    as_json: bool,
) -> None:
    import numpy as np

    from tcli import images
    from tcli.client.types import InferInput, RequestedOutput

    config = _call(client.model_config, metadata.get("name", ""), version, what="config")
    try:
        spec = images.parse_classifier(metadata, config, batch_size)
        files = images.image_files(paths)
        if not files:
            raise CliError(f"no image files in {', '.join(repr(p) for p in paths)}")
        data = [images.preprocess(images.load_image(f), spec, scaling) for f in files]
    except (images.NotAClassifier, images.ImageError) as exc:
        raise CliError(str(exc)) from None

    plan = images.batch_plan(len(files), batch_size)
    outputs = [RequestedOutput(spec.output_name, class_count=classes)]
    requests: list[tuple[list[InferInput], list[RequestedOutput] | None]] = []
    for batch in plan:
        tensor = np.stack([data[i] for i in batch]) if spec.batching else data[batch[0]]
        requests.append(([InferInput(spec.input_name, tensor, spec.datatype)], outputs))

    report: list[dict[str, Any]] = []
    for index, result in enumerate(_send(client, spec.model, version, requests, async_set, streaming)):
        names = [files[i] for i in plan[index]]
        rows = _classification_rows(result, spec, batch_size)
        if as_json:
            report.append(
                {
                    "request": index,
                    "batch_size": batch_size,
                    "images": [
                        {"image": name, "classes": [images.parse_class(entry) for entry in row]}
                        for name, row in zip(names, rows, strict=False)
                    ],
                }
            )
        else:
            _print(images.request_text(index, batch_size, names, rows))
    if as_json:
        _print(json.dumps(report, indent=2))


def _classification_rows(result: InferResult, spec: ClassifierSpec, batch_size: int) -> list[list[Any]]:
    from tcli import images
    from tcli.client.types import ClientError

    try:
        output = result.as_numpy(spec.output_name)
    except ClientError as exc:
        raise CliError(f"inference failed: {exc.message}") from None
    datatype = result.datatypes.get(spec.output_name, "BYTES")
    if datatype != "BYTES":
        raise CliError(
            f"received incorrect datatype for {spec.output_name}: {datatype} (expecting the BYTES "
            "strings of the classification extension; does the server support it?)"
        )
    try:
        return images.result_rows(output, batch_size, spec.batching)
    except ValueError as exc:
        raise CliError(f"inference failed: {exc}") from None


# generic mode -------------------------------------------------------------------------------------
def _shape_text(shape: Any) -> str:
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _what_to_give(client: HttpClient | GrpcClient, metadata: dict[str, Any], version: str) -> str:
    from tcli import images

    name = metadata.get("name", "")
    looks_like_classifier = True
    try:
        images.parse_classifier(metadata, _call(client.model_config, name, version, what="config"))
    except images.NotAClassifier:
        looks_like_classifier = False
    if looks_like_classifier:
        return f"nothing to infer: give image files or a folder of images for '{name}' (or --input tensors)"
    wanted = ", ".join(
        f"{t['name']} ({t['datatype']} {_shape_text(t['shape'])})" for t in metadata.get("inputs", [])
    )
    return (
        f"nothing to infer: model '{name}' takes {wanted or 'no inputs'}; pass each with "
        "--input NAME=@file.npy, --input NAME=@file.json or --input NAME=1,2,3"
    )


def _generic(
    client: HttpClient | GrpcClient,
    metadata: dict[str, Any],
    input_values: list[str],
    shape_values: list[str],
    *,
    version: str,
    classes: int | None,
    async_set: bool,
    streaming: bool,
    output_dir: Path | None,
    as_json: bool,
) -> None:
    from tcli.client.types import InferInput, RequestedOutput

    name = str(metadata.get("name", ""))
    model_inputs = {t["name"]: t for t in metadata.get("inputs", [])}
    batching = _batching(client, metadata, version)

    def known(input_name: str, flag: str) -> dict[str, Any]:
        if input_name not in model_inputs:
            names = ", ".join(model_inputs) or "none"
            raise CliError(f"{flag}: model '{name}' has no input '{input_name}' (its inputs: {names})")
        return model_inputs[input_name]

    shapes: dict[str, list[int]] = {}
    for text in shape_values:
        input_name, _, dims = text.rpartition(":")
        known(input_name, f"--shape {text}")
        try:
            shapes[input_name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise CliError(f"--shape {text}: expected NAME:D1,D2,... with whole numbers") from None
    values: dict[str, str] = {}
    for text in input_values:
        input_name, equals, value = text.partition("=")
        if not equals:
            raise CliError(f"--input {text}: expected NAME=@file.npy, NAME=@file.json or NAME=1,2,3")
        known(input_name, f"--input {text}")
        values[input_name] = value
    for input_name in shapes:
        if input_name not in values:
            raise CliError(f"--shape {input_name}: no --input {input_name}=... to apply it to")
    missing = [t for t in model_inputs.values() if t["name"] not in values]
    if missing:
        wanted = ", ".join(f"{t['name']} ({t['datatype']} {_shape_text(t['shape'])})" for t in missing)
        raise CliError(f"model '{name}' also needs {wanted}: add --input NAME=... for each")

    tensors = []
    for input_name, value in values.items():
        meta = model_inputs[input_name]
        array = _tensor(input_name, value, meta, shapes.get(input_name), batching)
        tensors.append(InferInput(input_name, array, meta["datatype"]))
    outputs = (
        [RequestedOutput(t["name"], class_count=classes) for t in metadata.get("outputs", [])]
        if classes
        else None
    )
    results = list(_send(client, name, version, [(tensors, outputs)], async_set, streaming))
    if len(results) == 1:
        _write_outputs(results[0], output_dir, as_json)
    elif not results:  # a decoupled model may answer with none (repeat_int32 for an empty IN)
        _print(f"model '{name}' sent no response")
    elif as_json and output_dir is None:
        from tcli import render

        _print(json.dumps([render.infer_result_json(result) for result in results], indent=2))
    else:  # a decoupled model's responses, each on its own
        for number, result in enumerate(results, 1):
            _write_outputs(result, output_dir, as_json, f"response {number}/{len(results)}")


def _batching(client: HttpClient | GrpcClient, metadata: dict[str, Any], version: str) -> bool:
    config = _call(client.model_config, metadata.get("name", ""), version, what="config")
    return int(config.get("max_batch_size", 0) or 0) > 0


def _tensor(
    name: str, value: str, meta: dict[str, Any], shape: list[int] | None, batching: bool
) -> np.ndarray[Any, Any]:
    """One --input value as an array of the model's data type and shape, or a one-line error."""
    import numpy as np

    from tcli.commands import infer_values

    datatype = str(meta["datatype"])
    model_shape = [int(d) for d in meta.get("shape", [])]
    raw_shape: list[int] | None = None
    if value.startswith("@"):
        raw, raw_shape = infer_values.read_file(name, Path(value[1:]))
    elif value.lstrip().startswith(("[", "{")):
        try:
            raw, raw_shape = infer_values.from_json(json.loads(value))
        except ValueError as exc:
            raise CliError(f"--input {name}: not valid JSON: {exc}") from None
    elif datatype == "BYTES":
        raw = np.array(value.split(",") if value else [], dtype=object)
    else:
        raw = infer_values.literals(name, value, datatype)
    array = infer_values.as_datatype(name, raw, datatype)

    wanted = shape or raw_shape
    if wanted is not None:
        if int(np.prod(wanted)) != array.size:
            raise CliError(
                f"--input {name}: {array.size} values do not fill shape {_shape_text(wanted)} "
                f"({int(np.prod(wanted))} values); fix the data or --shape {name}:..."
            )
        array = array.reshape(wanted)
    else:
        fixed = model_shape[1:] if batching else model_shape
        if array.ndim <= 1 and fixed and all(d > 0 for d in fixed) and array.size == int(np.prod(fixed)):
            array = array.reshape(fixed)  # a flat list of exactly one item's values
    if batching and array.ndim == len(model_shape) - 1:
        array = array[np.newaxis]  # one item: add the batch dim
    fits = array.ndim == len(model_shape) and all(
        m == -1 or m == a for m, a in zip(model_shape, array.shape, strict=True)
    )
    if not fits:
        batch_note = " (the first dim is the batch; -1 = any size)" if batching else " (-1 = any size)"
        raise CliError(
            f"--input {name}: shape {_shape_text(array.shape)} does not match the model's "
            f"{_shape_text(model_shape)}{batch_note}; give matching data or --shape {name}:D1,D2,..."
        )
    return array


def _write_outputs(result: InferResult, output_dir: Path | None, as_json: bool, part: str = "") -> None:
    """One response's outputs; `part` ("response 2 of 3") names it among a decoupled model's."""
    from tcli import render

    if output_dir is None:
        if as_json:
            _print(json.dumps(render.infer_result_json(result), indent=2))
        else:
            render.print_table(render.infer_outputs_table(result, part))
        return
    import numpy as np

    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create --output-dir '{output_dir}': {exc.strerror or exc}") from None
    for output_name, array in result.outputs.items():
        datatype = result.datatypes.get(output_name, "")
        safe = output_name.replace(os.sep, "_")
        # OUT.1.npy, OUT.2.npy, ... for a decoupled model's several responses
        number = "." + part.split()[1].partition("/")[0] if part else ""
        path = output_dir / f"{safe}{number}.{'json' if as_json else 'npy'}"
        if as_json:
            path.write_text(json.dumps(render.output_json(output_name, datatype, array)) + "\n")
        else:
            np.save(path, _savable(array))
        _print(f"{output_name}: {datatype} {_shape_text(array.shape)} -> {path}")


def _savable(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """BYTES outputs as str (or bytes) arrays, which np.load reads without pickle."""
    import numpy as np

    if array.dtype != object:
        return array
    items = [v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1).tolist()]
    try:
        return np.array([v.decode() for v in items], dtype=str).reshape(array.shape)
    except UnicodeDecodeError:
        return np.array(items, dtype=bytes).reshape(array.shape)
