"""The dragonfly agent: a model in object storage is downloaded through the node's Dragonfly proxy (a
peer-to-peer cache: hundreds of nodes pulling one model fetch it from the bucket about once) instead
of from the bucket, as Dragonfly's repository agent for Triton does.

On LOAD it reads the JSON file named by TRITON_DRAGONFLY_CONFIG_PATH (default
/home/triton/dragonfly_config.json):

    {"proxy": "http://127.0.0.1:65001",            the Dragonfly proxy (dfdaemon)
     "header": {"X-Dragonfly-Tag": "models"},      extra request headers
     "filter": ["X-Amz-Algorithm", "X-Amz-Date"]}  query parameters Dragonfly ignores when it tells
                                                   downloads apart (a presigned URL's signature changes)

lists the model's objects (credentials as for the repository), signs a GET URL for each and downloads
it through the proxy with those headers and `X-Dragonfly-Filter: <filters joined by &>`, into a
folder the model then loads from. A proxy that is down fails the load with a reason naming it.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.protocol.errors import TritonError, invalid_arg, unavailable
from server.repository.agents.base import Action, AgentModel, ArtifactType, RepositoryAgent
from server.repository.storage.location import RemoteLocation, parse_location
from server.repository.storage.objects import CONNECT_TIMEOUT_S, READ_TIMEOUT_S, ObjectStore
from server.repository.storage.stores import open_store

CONFIG_VARIABLE = "TRITON_DRAGONFLY_CONFIG_PATH"
DEFAULT_CONFIG_PATH = "/home/triton/dragonfly_config.json"
DOWNLOAD_WORKERS = 4
_CHUNK = 1 << 20


@dataclass(frozen=True)
class DragonflyConfig:
    proxy: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    filters: tuple[str, ...] = ()

    @classmethod
    def read(cls) -> DragonflyConfig:
        path = os.environ.get(CONFIG_VARIABLE, DEFAULT_CONFIG_PATH)
        try:
            document = json.loads(Path(path).read_text())
        except OSError as exc:
            raise invalid_arg(
                f"dragonfly agent: cannot read its config {path} ({exc.strerror}); set {CONFIG_VARIABLE} "
                'to a JSON file like {"proxy": "http://127.0.0.1:65001", "header": {}, "filter": []}'
            ) from None
        except ValueError as exc:
            raise invalid_arg(f"dragonfly agent: its config {path} is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise invalid_arg(f"dragonfly agent: its config {path} must be a JSON object")
        headers = document.get("header") or {}
        filters = document.get("filter") or []
        if not isinstance(headers, dict) or not isinstance(filters, list):
            raise invalid_arg(
                f"dragonfly agent: in {path}, 'header' must be an object and 'filter' a list of strings"
            )
        return cls(
            str(document.get("proxy") or ""),
            {str(k): str(v) for k, v in headers.items()},
            tuple(map(str, filters)),
        )

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.filters:
            headers["X-Dragonfly-Filter"] = "&".join(self.filters)
        return headers


class DragonflyAgent(RepositoryAgent):
    name = "dragonfly"
    accepts = frozenset({ArtifactType.REMOTE_FILESYSTEM})

    def model_action(self, model: AgentModel, action: Action) -> None:
        if action != Action.LOAD:
            return
        location = parse_location(model.location)
        if not isinstance(location, RemoteLocation):
            raise invalid_arg(
                f"dragonfly agent: model '{model.name}' is in a local folder ({model.location}); it downloads "
                "models from object storage (s3://, gs://, as://)"
            )
        config = DragonflyConfig.read()
        target = model.acquire_mutable_location()
        download(open_store(location), location, target, config)
        model.update_location(ArtifactType.FILESYSTEM, target)


def download(store: ObjectStore, location: RemoteLocation, target: Path, config: DragonflyConfig) -> int:
    """Every object of the model folder at `location` into `target`, through the proxy; the count."""
    import httpx

    base = f"{location.prefix}/"
    objects = [info for info in store.list(base) if not info.key.endswith("/")]
    if not objects:
        raise unavailable(f"dragonfly agent: directory or file does not exist at {location.url}")
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    with httpx.Client(
        proxy=config.proxy or None, timeout=timeout, headers=config.request_headers()
    ) as client:

        def fetch(key: str) -> None:
            path = target / key[len(base) :]
            path.parent.mkdir(parents=True, exist_ok=True)
            _get(client, store.presign(key), path, key, config)

        with ThreadPoolExecutor(DOWNLOAD_WORKERS, thread_name_prefix="dragonfly") as pool:
            for future in [pool.submit(fetch, info.key) for info in objects]:
                future.result()
    return len(objects)


def _get(client: Any, url: str, path: Path, key: str, config: DragonflyConfig) -> None:
    import httpx

    via = f"through proxy {config.proxy}" if config.proxy else "(no proxy configured)"
    try:
        with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise unavailable(
                    f"dragonfly agent: downloading {key} {via} answered HTTP {response.status_code}"
                )
            with path.open("wb") as file:
                for chunk in response.iter_bytes(_CHUNK):
                    file.write(chunk)
    except httpx.HTTPError as exc:
        raise unavailable(
            f"dragonfly agent: failed to download {key} {via}: {type(exc).__name__}: {exc}"
        ) from None
    except TritonError:
        raise
