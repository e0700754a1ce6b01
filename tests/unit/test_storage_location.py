"""Repository paths in Triton's syntax, and credentials found where Triton looks for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.protocol.errors import TritonError
from server.repository.storage.credentials import azure_credentials, gcs_credentials, s3_credentials
from server.repository.storage.location import RemoteLocation, is_remote, parse_location


@pytest.mark.parametrize(
    ("text", "bucket", "prefix", "endpoint"),
    [
        ("s3://bucket/path/to/models", "bucket", "path/to/models", None),
        ("s3://bucket", "bucket", "", None),
        ("s3://bucket//models/", "bucket", "models", None),
        ("s3://127.0.0.1:9000/bucket/models", "bucket", "models", "http://127.0.0.1:9000"),
        ("s3://http://localhost:9000/bucket/a/b", "bucket", "a/b", "http://localhost:9000"),
        (
            "s3://https://minio.svc.cluster.local:443/models/",
            "models",
            "",
            "https://minio.svc.cluster.local:443",
        ),
    ],
)
def test_s3_paths(text: str, bucket: str, prefix: str, endpoint: str | None) -> None:
    location = parse_location(text)
    assert isinstance(location, RemoteLocation)
    assert (location.scheme, location.bucket, location.prefix, location.endpoint) == (
        "s3",
        bucket,
        prefix,
        endpoint,
    )


def test_gs_and_azure_paths() -> None:
    gs = parse_location("gs://my-bucket/repo/models")
    assert isinstance(gs, RemoteLocation)
    assert (gs.scheme, gs.bucket, gs.prefix) == ("gs", "my-bucket", "repo/models")
    azure = parse_location("as://account/container/path/to/repo")
    assert isinstance(azure, RemoteLocation)
    assert (azure.scheme, azure.account, azure.bucket, azure.prefix) == (
        "as",
        "account",
        "container",
        "path/to/repo",
    )


def test_local_paths_stay_paths() -> None:
    assert parse_location("model_repository") == Path("model_repository")
    assert parse_location(Path("/models")) == Path("/models")
    assert not is_remote("/models/s3://x")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("s3://", "Invalid bucket name"),
        ("gs://", "No bucket name found"),
        ("as://account", "as://<account>/<container>"),
        ("s3://https://bucket/models", "host:port"),
    ],
)
def test_malformed_remote_paths_are_named(text: str, words: str) -> None:
    with pytest.raises(TritonError) as error:
        parse_location(text)
    assert words in error.value.message


def test_a_child_location_keeps_the_form_the_user_wrote() -> None:
    location = parse_location("s3://127.0.0.1:9000/bucket/models")
    assert isinstance(location, RemoteLocation)
    child = location.child("add_sub")
    assert (child.prefix, child.url) == ("models/add_sub", "s3://127.0.0.1:9000/bucket/models/add_sub")
    assert child.key("1/model.py") == "models/add_sub/1/model.py"


def _remote(text: str) -> RemoteLocation:
    location = parse_location(text)
    assert isinstance(location, RemoteLocation)
    return location


def test_credentials_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/gcs.json")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "acct")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "key")
    s3 = s3_credentials(_remote("s3://bucket/models"))
    assert (s3.key_id, s3.secret_key, s3.session_token, s3.region) == ("id", "secret", "token", "eu-west-1")
    assert gcs_credentials(_remote("gs://bucket/models")).path == "/keys/gcs.json"
    azure = azure_credentials(_remote("as://acct/container/models"))
    assert (azure.account, azure.key) == ("acct", "key")


def test_the_credential_file_wins_and_its_longest_matching_key_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    document = {
        "s3": {
            "": {"key_id": "default", "secret_key": "s0"},
            "s3://bucket-2": {"key_id": "bucket-2", "secret_key": "s2", "region": "us-west-2"},
            "s3://bucket-2/team": {"key_id": "team", "secret_key": "s3"},
        },
        "gs": {"": "/keys/default.json", "gs://other": "/keys/other.json"},
        "as": {"as://acct/container": {"account_str": "acct", "account_key": "k"}},
    }
    path = tmp_path / "cloud_credential.json"
    path.write_text(json.dumps(document))
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    assert s3_credentials(_remote("s3://bucket-1/models")).key_id == "default"
    assert s3_credentials(_remote("s3://bucket-2/models")).region == "us-west-2"
    assert s3_credentials(_remote("s3://bucket-2/team/models")).key_id == "team"
    assert gcs_credentials(_remote("gs://other/models")).path == "/keys/other.json"
    assert gcs_credentials(_remote("gs://any/models")).path == "/keys/default.json"
    assert azure_credentials(_remote("as://acct/container/m")).key == "k"


def test_an_unreadable_credential_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    with pytest.raises(TritonError) as error:
        s3_credentials(_remote("s3://bucket/models"))
    assert str(path) in error.value.message and "TRITON_CLOUD_CREDENTIAL_PATH" in error.value.message
