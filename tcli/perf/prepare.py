"""What a `tcli perf` measurement needs before it starts: the model as the server describes it (with a
reader of the statistics perf compares, when the server has the extension), and the LoadSpec, the
model's input data encoded once for the workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tcli.client import connect
from tcli.client.tls import ClientTls
from tcli.client.types import ClientError
from tcli.errors import CliError, unknown_model
from tcli.perf.data import from_json_file, synthetic
from tcli.perf.encode import build_load_spec
from tcli.perf.model import model_info, resolve_shapes
from tcli.perf.stats import parse_statistics


def read_model(
    model: str, version: str, protocol: str, url: str | None, tls: ClientTls | None = None
) -> tuple[Any, bool, Any]:
    """The model's description, whether the server has the statistics extension, and a function that
    reads the statistics perf needs (the model's, or every model's for an ensemble)."""
    try:
        client = connect(url, protocol, timeout=30.0, tls=tls)
    except ClientError as exc:  # a TLS file that cannot be read or used
        raise CliError(exc.message) from None
    try:
        try:
            server = client.server_metadata()
        except ClientError as exc:
            raise CliError(exc.message) from None
        try:
            metadata = client.model_metadata(model, version)
            config = client.model_config(model, version)
        except ClientError as exc:
            raise CliError(f"failed to get model metadata: {exc.message}{_hint(client, model)}") from None

        def fetch_config(name: str, step_version: str) -> dict[str, Any]:
            try:
                return client.model_config(name, step_version)
            except ClientError as exc:
                raise CliError(f"failed to get the config of ensemble step '{name}': {exc.message}") from None

        info = model_info(model, version, metadata, config, fetch_config)
    except BaseException:
        client.close()
        raise
    has_stats = "statistics" in (server.get("extensions") or [])
    if not has_stats:
        client.close()
        return info, False, None

    def read_stats() -> Any:
        try:
            answer = client.statistics() if info.ensemble else client.statistics(model, version)
        except ClientError as exc:
            raise CliError(f"failed to get the model's statistics: {exc.message}") from None
        return parse_statistics(answer)

    return info, True, read_stats


def build_spec(
    info: Any,
    protocol: str,
    url: str | None,
    batch_size: int,
    shapes: list[str],
    input_data: str,
    string_length: int,
    string_data: str | None,
    headers: list[tuple[str, str]],
    streaming: bool,
    sequence_length: int | None,
    sequence_length_variation: float,
    id_start: int,
    id_end: int,
    num_of_sequences: int,
    tls: ClientTls | None = None,
) -> Any:
    user_data = input_data not in ("random", "zero")
    resolved = resolve_shapes(info, shapes, allow_variable=user_data)
    if user_data:
        path = Path(input_data)
        if path.is_dir():
            raise CliError(
                f"--input-data '{input_data}' is a directory: tcli perf reads random, zero or a JSON file"
            )
        streams = from_json_file(path, info, resolved)
    else:
        streams = synthetic(info, resolved, input_data, string_length, string_data)
    spec = build_load_spec(
        info,
        streams,
        protocol=protocol,
        url=url,
        batch_size=batch_size,
        headers=headers,
        streaming=streaming,
        sequence_length=sequence_length or 20,
        sequence_length_variation=sequence_length_variation,
        sequence_length_given=sequence_length is not None,
        user_data=user_data,
        sequence_id_start=id_start,
        sequence_id_end=id_end,
        num_of_sequences=num_of_sequences,
    )
    spec.grpc_client = os.environ.get("TCLI_PERF_GRPC_CLIENT", "raw")  # "grpcio" to compare clients
    if tls is not None:  # the load generators build the same contexts: their errors, here and once
        try:
            tls.grpc_context()
            if spec.https:
                tls.https_context()
        except ClientError as exc:
            raise CliError(exc.message) from None
    spec.tls = tls
    spec.https = protocol == "http" and (url or "").strip().startswith("https://")
    return spec


def _hint(client: Any, model: str) -> str:
    """ "; model 'X' is not in the server's repositories: did you mean ..." when the server's index
    lacks the model (nothing when the index cannot be read, e.g. a restricted API)."""
    try:
        known = [str(row.get("name", "")) for row in client.repository_index()]
    except ClientError:
        return ""
    return "" if model in known else f"; {unknown_model(model, known)}"
