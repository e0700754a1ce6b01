"""Download an MLflow model with mlflow's own API, in bounded time, and read its MLmodel file.

mlflow retries a failed request seven times with exponential backoff by default: an unreachable
tracking server took about four minutes to fail. The server is probed once first, and mlflow's
requests get the user's timeout and few retries (unless the environment already sets them).
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcli.errors import CliError
from tcli.mlflow_import.uri import ModelUri, parse_model_uri, triton_name


@dataclass(frozen=True)
class FetchedModel:
    uri: ModelUri
    folder: Path  # the downloaded MLmodel folder
    flavors: dict[str, dict[str, Any]]
    signature: Any  # mlflow.models.ModelSignature or None
    name: str  # the Triton model name it suggests
    version: int | None  # the registry version, when there is one


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    for prefix in ("RESOURCE_DOES_NOT_EXIST: ", "INVALID_PARAMETER_VALUE: "):
        text = text.removeprefix(prefix)
    return text or type(error).__name__


def check_reachable(tracking_uri: str, timeout: float) -> None:
    """Any HTTP answer will do (even 401 or 404): only a server that does not answer is an error."""
    if not tracking_uri.startswith(("http://", "https://")):
        return  # databricks, sqlite:, file: stores have no server to probe
    import httpx

    try:
        httpx.get(tracking_uri.rstrip("/") + "/health", timeout=timeout)
    except httpx.TimeoutException:
        raise CliError(
            f"the MLflow tracking server at {tracking_uri} did not answer within {timeout:g} s: "
            "check MLFLOW_TRACKING_URI (or --tracking-uri), or raise --timeout"
        ) from None
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the MLflow tracking server at {tracking_uri} ({_one_line(exc)}): "
            "check MLFLOW_TRACKING_URI (or --tracking-uri)"
        ) from None


def _bound_requests(timeout: int) -> None:
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(timeout)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def fetch_model(text: str, into: Path, *, tracking_uri: str | None, timeout: int) -> FetchedModel:
    """Download the model `text` names into `into` and read its flavours and signature."""
    try:
        uri = parse_model_uri(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if uri.needs_tracking_server:
        if not tracking_uri:
            raise CliError(f"{text} needs a tracking server: set MLFLOW_TRACKING_URI or pass --tracking-uri")
        check_reachable(tracking_uri, timeout)
    elif not Path(uri.text.removeprefix("file://")).is_dir():
        raise CliError(f"'{text}' is not a folder, nor a models:/ or runs:/ URI")
    _bound_requests(timeout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mlflow's import and calls warn about matters of its own
        try:
            import mlflow
            from mlflow.models import Model
        except ImportError:
            raise CliError("tcli repo import needs mlflow: pip install 'tcli[mlflow]'") from None

        logging.getLogger("mlflow").setLevel(logging.ERROR)
        if tracking_uri:
            mlflow.set_tracking_uri(tracking_uri)
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri.text, dst_path=str(into)))
            if not (local / "MLmodel").is_file():
                raise CliError(f"{text} is not an MLflow model: it has no MLmodel file")
            model = Model.load(str(local))
            name, version = _registry_identity(uri)
        except CliError:
            raise
        except Exception as exc:  # mlflow's errors (MlflowException, requests, OSError) as one line
            where = f" (tracking server {tracking_uri})" if uri.needs_tracking_server else ""
            raise CliError(f"cannot import {text}{where}: {_one_line(exc)}") from None
    return FetchedModel(uri, local, dict(model.flavors), model.signature, name, version)


def _registry_identity(uri: ModelUri) -> tuple[str, int | None]:
    """The model name and registry version: an alias names a version only the registry knows, and a
    logged model's name is in the tracking store."""
    from mlflow import MlflowClient

    if uri.kind == "registry" and uri.alias is not None and uri.registered_name is not None:
        found = MlflowClient().get_model_version_by_alias(uri.registered_name, uri.alias)
        return uri.default_name, int(found.version)
    if uri.kind == "logged" and uri.logged_model_id is not None:
        logged = MlflowClient().get_logged_model(uri.logged_model_id)
        return triton_name(logged.name or uri.logged_model_id), None
    return uri.default_name, uri.version
