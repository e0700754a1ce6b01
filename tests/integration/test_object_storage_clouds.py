"""gs:// and as:// repositories, served from real emulators on loopback: Google's storage API as
gcp-storage-emulator serves it (google-cloud-storage honours STORAGE_EMULATOR_HOST), and Azurite,
Microsoft's Azure Storage emulator (reached through AZURE_STORAGE_CONNECTION_STRING)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from tests.object_storage import AZURITE_ACCOUNT, azurite_server, gcs_server

ROOT = Path(__file__).resolve().parents[2]
ADD_SUB = ROOT / "model_repository" / "add_sub"


def serve(url: str) -> Server:
    settings = ServerSettings(
        [url], ControlMode.POLL, repository_poll_secs=0.3, http_port=0, allow_grpc=False, allow_metrics=False
    )
    return Server(settings).start()


def index(server: Server) -> list[tuple[str, str, str]]:
    return [(r["name"], r.get("version", ""), r.get("state", "")) for r in server.manager.index()]


def infer(server: Server) -> list[float]:
    import numpy as np
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.arange(4, dtype=np.float32))
    return client.infer("add_sub", inputs).as_numpy("OUTPUT0").tolist()  # type: ignore[no-any-return]


def wait_for(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def files(folder: Path) -> list[tuple[str, bytes]]:
    return [
        (p.relative_to(folder).as_posix(), p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


def test_a_gcs_repository_is_served_and_polled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with gcs_server(tmp_path) as gcs:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.host)
        monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
        from google.cloud import storage

        client = storage.Client(project="test")
        bucket = client.create_bucket("gcs-models")
        for name, data in files(ADD_SUB):
            bucket.blob(f"repo/add_sub/{name}").upload_from_string(data)
        server = serve("gs://gcs-models/repo")
        try:
            assert index(server) == [("add_sub", "1", "READY")]
            assert infer(server) == [0.0, 2.0, 4.0, 6.0]
            for name, data in files(ADD_SUB / "1"):  # a new version folder
                bucket.blob(f"repo/add_sub/2/{name}").upload_from_string(data)
            wait_for(lambda: ("add_sub", "2", "READY") in index(server))
        finally:
            server.stop()


def test_an_azure_repository_is_served_and_polled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with azurite_server(tmp_path) as azurite:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
        monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
        from azure.storage.blob import BlobServiceClient

        container = BlobServiceClient.from_connection_string(azurite.connection_string).create_container(
            "models"
        )
        for name, data in files(ADD_SUB):
            container.upload_blob(f"repo/add_sub/{name}", data)
        server = serve(f"as://{AZURITE_ACCOUNT}/models/repo")
        try:
            assert index(server) == [("add_sub", "1", "READY")]
            assert infer(server) == [0.0, 2.0, 4.0, 6.0]
            container.delete_blobs(*[f"repo/add_sub/{name}" for name, _ in files(ADD_SUB)])
            wait_for(lambda: index(server) == [])
        finally:
            server.stop()


def test_an_azure_repository_with_a_wrong_key_is_unready_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with azurite_server(tmp_path) as azurite:
        wrong = azurite.connection_string.replace("AccountKey=Eby8", "AccountKey=AAAA")
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong)
        server = serve(f"as://{AZURITE_ACCOUNT}/models/repo")
        try:
            assert server.service.live() and not server.service.ready()
            [error] = server.manager.repository_errors().values()
            assert "AuthorizationFailure" in error or "AuthenticationFailed" in error, error
        finally:
            server.stop()
