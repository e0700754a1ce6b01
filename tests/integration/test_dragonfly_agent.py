"""The dragonfly agent against real parts: a model in moto's S3 server (which records every request it
receives, headers included), downloaded through tinyproxy (a real HTTP forward proxy, Debian's
package, standing where Dragonfly's dfdaemon proxy stands), whose log shows what passed through."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.protocol.errors import TritonError
from server.repository.manager import ControlMode, ModelManager
from tests.object_storage import free_port, s3_env, s3_server, upload_folder, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
FILTERS = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
]


@contextlib.contextmanager
def tinyproxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    binary = shutil.which("tinyproxy")
    if binary is None:
        pytest.skip("tinyproxy is not installed (Debian package tinyproxy; make test installs it)")
    port = free_port()
    log = tmp_path / "tinyproxy.log"
    config = tmp_path / "tinyproxy.conf"
    config.write_text(
        f'Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile "{log}"\nLogLevel Info\n'
        'MaxClients 20\nAllow 127.0.0.1\nViaProxyName "tinyproxy"\n'
    )
    process = subprocess.Popen(
        [binary, "-d", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, process, "tinyproxy")
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()
        process.wait(10)


def dragonfly_model(tmp_path: Path) -> Path:
    model = tmp_path / "add_sub"
    shutil.copytree(
        ROOT / "model_repository" / "add_sub", model, ignore=shutil.ignore_patterns("__pycache__")
    )
    config = model / "config.pbtxt"
    config.write_text(config.read_text() + '\nmodel_repository_agents { agents [ { name: "dragonfly" } ] }\n')
    return model


def write_dragonfly_config(tmp_path: Path, proxy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "dragonfly_config.json"
    path.write_text(
        json.dumps({"proxy": proxy, "header": {"X-Dragonfly-Tag": "tcli-test"}, "filter": FILTERS})
    )
    monkeypatch.setenv("TRITON_DRAGONFLY_CONFIG_PATH", str(path))


def test_a_model_is_downloaded_through_the_proxy_with_dragonflys_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = tmp_path / "s3-requests.jsonl"
    s3_env(monkeypatch)
    environment = {"MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(recording)}
    with s3_server(environment) as s3, tinyproxy(tmp_path) as (proxy, proxy_log):
        client = s3.client()
        client.create_bucket(Bucket="p2p")
        upload_folder(client, "p2p", dragonfly_model(tmp_path / "src"), "repo/add_sub")
        write_dragonfly_config(tmp_path, proxy, monkeypatch)
        recording.write_text("")  # from here on: what serving the model asks of S3
        manager = ModelManager([s3.url("p2p", "repo")], ControlMode.EXPLICIT)
        try:
            manager.load("add_sub")
            assert [r.get("state") for r in manager.index()] == ["READY"]
        finally:
            manager.shutdown()
        requests = [json.loads(line) for line in recording.read_text().splitlines()]
        gets = [r for r in requests if r["method"] == "GET" and "/p2p/repo/add_sub/" in r["url"]]
        model_gets = [r for r in gets if "/1/model.py" in r["url"]]
        assert model_gets, gets
        for request in model_gets:  # the model file only ever came through the proxy, as Dragonfly asks
            headers = {k.lower(): v for k, v in request["headers"].items()}
            assert "tinyproxy" in headers.get("via", ""), headers
            assert headers["x-dragonfly-filter"] == "&".join(FILTERS)
            assert headers["x-dragonfly-tag"] == "tcli-test"
            assert "X-Amz-Signature=" in request["url"]  # a presigned URL, no credentials needed
        log = proxy_log.read_text()
        assert "/p2p/repo/add_sub/1/model.py?" in log and "/p2p/repo/add_sub/config.pbtxt?" in log


def test_a_proxy_that_is_down_fails_the_load_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_env(monkeypatch)
    down = f"http://127.0.0.1:{free_port()}"
    with s3_server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="p2p")
        upload_folder(client, "p2p", dragonfly_model(tmp_path / "src"), "repo/add_sub")
        write_dragonfly_config(tmp_path, down, monkeypatch)
        manager = ModelManager([s3.url("p2p", "repo")], ControlMode.EXPLICIT)
        try:
            with pytest.raises(TritonError):
                manager.load("add_sub")
            [row] = manager.index()
            assert row["state"] == "UNAVAILABLE"
            assert f"through proxy {down}" in row["reason"], row
        finally:
            manager.shutdown()


def test_dragonfly_refuses_a_local_model_and_a_missing_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dragonfly_model(tmp_path / "repo")
    monkeypatch.setenv("TRITON_DRAGONFLY_CONFIG_PATH", str(tmp_path / "missing.json"))
    manager = ModelManager([tmp_path / "repo"], ControlMode.EXPLICIT)
    try:
        with pytest.raises(TritonError):
            manager.load("add_sub")
        [row] = manager.index()
        assert "is in a local folder" in row["reason"] and "object storage" in row["reason"]
    finally:
        manager.shutdown()


def test_a_model_in_azure_storage_comes_through_the_proxy_with_a_sas_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.storage.blob import BlobServiceClient

    from tests.object_storage import AZURITE_ACCOUNT, azurite_server

    with azurite_server(tmp_path) as azurite, tinyproxy(tmp_path) as (proxy, proxy_log):
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
        monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
        container = BlobServiceClient.from_connection_string(azurite.connection_string).create_container(
            "p2p"
        )
        model = dragonfly_model(tmp_path / "src")
        for path in sorted(model.rglob("*")):
            if path.is_file():
                container.upload_blob(f"repo/add_sub/{path.relative_to(model).as_posix()}", path.read_bytes())
        write_dragonfly_config(tmp_path, proxy, monkeypatch)
        manager = ModelManager([f"as://{AZURITE_ACCOUNT}/p2p/repo"], ControlMode.EXPLICIT)
        try:
            manager.load("add_sub")
            assert [r.get("state") for r in manager.index()] == ["READY"]
        finally:
            manager.shutdown()
        log = proxy_log.read_text()
        assert "/p2p/repo/add_sub/1/model.py?" in log and "sig=" in log  # a SAS-signed URL, through the proxy
