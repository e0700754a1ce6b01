"""Real object stores on loopback for the tests: moto's S3 server (`moto_server`), the GCS emulator
(`gcp-storage-emulator`) and Azurite (Microsoft's Azure Storage emulator, from npm), each started as
a process of its own on a free port and stopped with the test; plus helpers that upload folders."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
S3_KEY_ID, S3_SECRET = "tcli-test-key", "tcli-test-secret"  # moto accepts any until auth is enabled
# Azurite's well-known development account (public, documented by Microsoft)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s")


@contextlib.contextmanager
def _process(command: list[str], port: int, what: str, env: dict[str, str] | None = None) -> Iterator[None]:
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    try:
        wait_for_port(port, process, what)
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class S3Server:
    port: int
    process: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, bucket: str, prefix: str = "") -> str:
        """The repository path in Triton's syntax for an S3-compatible endpoint."""
        return f"s3://127.0.0.1:{self.port}/{bucket}" + (f"/{prefix}" if prefix else "")

    def client(self, key_id: str = S3_KEY_ID, secret: str = S3_SECRET) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )


@contextlib.contextmanager
def s3_server(extra_env: dict[str, str] | None = None) -> Iterator[S3Server]:
    moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    if not Path(moto).exists():
        pytest.skip("moto_server is not installed (pip install 'tcli[test]')")
    port = free_port()
    with _process([moto, "-H", "127.0.0.1", "-p", str(port)], port, "moto_server", extra_env):
        yield S3Server(port)


def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials a Triton user puts in the pod's environment, pointed at the test server."""
    monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def upload_folder(client: Any, bucket: str, folder: Path, prefix: str) -> int:
    """Every file under `folder` to `bucket` under `prefix`; the count."""
    count = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            key = (
                f"{prefix}/{path.relative_to(folder).as_posix()}"
                if prefix
                else path.relative_to(folder).as_posix()
            )
            client.upload_file(str(path), bucket, key)
            count += 1
    return count


def delete_prefix(client: Any, bucket: str, prefix: str) -> None:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    for item in listed.get("Contents", []):
        client.delete_object(Bucket=bucket, Key=item["Key"])


@dataclass
class GcsServer:
    port: int

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def gcs_server(tmp_path: Path) -> Iterator[GcsServer]:
    emulator = shutil.which("gcp-storage-emulator") or str(
        Path(sys.executable).parent / "gcp-storage-emulator"
    )
    if not Path(emulator).exists():
        pytest.skip("gcp-storage-emulator is not installed (pip install 'tcli[test]')")
    port = free_port()
    command = [emulator, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"]
    with _process(command, port, "gcp-storage-emulator"):
        yield GcsServer(port)


@dataclass
class AzuriteServer:
    port: int

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT};"
        )


def azurite_binary() -> str | None:
    local = ROOT / ".venv" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


@contextlib.contextmanager
def azurite_server(tmp_path: Path) -> Iterator[AzuriteServer]:
    binary = azurite_binary()
    if binary is None:
        pytest.skip("Azurite is not installed (make test installs it with npm into .venv/node_modules)")
    port = free_port()
    command = [
        binary,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(tmp_path / "azurite"),
    ]
    command += ["--silent", "--skipApiVersionCheck", "--loose"]
    with _process(command, port, "azurite-blob"):
        yield AzuriteServer(port)
