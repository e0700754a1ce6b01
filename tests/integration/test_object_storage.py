"""Serving a repository in S3: a real S3-compatible server (moto) on loopback, real uploads, edits and
deletes while a real tcli server polls, and a real tritonclient asking it. Faults (wrong credentials,
a missing bucket, an endpoint that is down) keep the server up and unready, never hung."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from server.app import Server, ServerSettings
from server.repository.manager import ControlMode
from server.repository.sources import RemoteRepository
from tests.object_storage import (
    S3_KEY_ID,
    S3_SECRET,
    S3Server,
    delete_prefix,
    free_port,
    s3_env,
    s3_server,
    upload_folder,
)
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "model_repository"
BUCKET = "models"
POLL_S = 0.3


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def bucket(s3: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket holding add_sub under models/, with the pod's credentials in the environment."""
    s3_env(monkeypatch)
    name = f"b-{request.node.name.replace('_', '-')[:40].lower()}"
    client = s3.client()
    client.create_bucket(Bucket=name)
    upload_folder(client, name, EXAMPLES / "add_sub", "repo/add_sub")
    yield name
    delete_prefix(client, name, "")
    client.delete_bucket(Bucket=name)


def start(url: str, mode: ControlMode = ControlMode.POLL, **settings: Any) -> Server:
    return Server(
        ServerSettings(
            [url],
            model_control_mode=mode,
            repository_poll_secs=POLL_S,
            http_port=0,
            allow_grpc=False,
            allow_metrics=False,
            **settings,
        )
    ).start()


def add_sub(server: Server, model: str = "add_sub") -> list[float]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    a = np.arange(4, dtype=np.float32)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    result = client.infer(model, inputs)
    return result.as_numpy("OUTPUT0").tolist()  # type: ignore[no-any-return]


def states(server: Server, name: str) -> dict[str, str]:
    return {
        row.get("version", ""): row.get("state", "") for row in server.manager.index() if row["name"] == name
    }


def mirror(server: Server) -> Any:
    repository = server.manager.repositories[0]
    assert isinstance(repository, RemoteRepository)
    return repository.mirror


def test_serves_a_repository_from_s3(s3: S3Server, bucket: str) -> None:
    server = start(s3.url(bucket, "repo"), ControlMode.NONE)
    try:
        assert server.service.ready()
        assert add_sub(server) == [0.0, 2.0, 4.0, 6.0]
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert client.is_server_ready()
        index = client.get_model_repository_index()
        assert [(m["name"], m["version"], m["state"]) for m in index] == [("add_sub", "1", "READY")]
    finally:
        server.stop()


def test_poll_picks_up_new_removed_and_changed_models(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    client = s3.client()
    server = start(s3.url(bucket, "repo"))
    try:
        assert states(server, "add_sub") == {"1": "READY"}
        # a new model uploaded to the bucket goes live
        upload_folder(client, bucket, EXAMPLES / "simple_identity", "repo/simple_identity")
        wait_until(lambda: states(server, "simple_identity") == {"1": "READY"}, "the uploaded model")
        # a new version folder loads (the config's default policy serves the latest)
        upload_folder(client, bucket, EXAMPLES / "add_sub" / "1", "repo/add_sub/2")
        wait_until(lambda: states(server, "add_sub").get("2") == "READY", "version 2 of add_sub")
        # a changed object reloads that model only
        identity = server.manager.models()["simple_identity"]
        edited = tmp_path / "model.py"
        shutil.copy(EXAMPLES / "add_sub" / "1" / "model.py", edited)
        edited.write_text(edited.read_text().replace("np.add(in0, in1)", "(np.add(in0, in1) + 100)"))
        client.upload_file(str(edited), bucket, "repo/add_sub/2/model.py")
        wait_until(lambda: add_sub(server) == [100.0, 102.0, 104.0, 106.0], "the edited model.py")
        assert server.manager.models()["simple_identity"] is identity  # untouched
        # a removed model unloads and leaves the index
        delete_prefix(client, bucket, "repo/simple_identity/")
        wait_until(lambda: not states(server, "simple_identity"), "the removed model to go")
        copy = mirror(server).root / "simple_identity"
        wait_until(lambda: not copy.exists(), "its local copy to go")
    finally:
        server.stop()


def test_an_unchanged_bucket_is_not_downloaded_again(s3: S3Server, bucket: str) -> None:
    server = start(s3.url(bucket, "repo"))
    try:
        transfer = mirror(server).transfer
        before = (transfer.objects, transfer.bytes)
        assert before[0] == 2  # config.pbtxt and 1/model.py
        for _ in range(5):
            server.manager.poll_once()
        assert (transfer.objects, transfer.bytes) == before
    finally:
        server.stop()


def test_a_broken_new_config_keeps_the_old_version_serving(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    client = s3.client()
    server = start(s3.url(bucket, "repo"))
    try:
        broken = tmp_path / "config.pbtxt"
        broken.write_text((EXAMPLES / "add_sub" / "config.pbtxt").read_text() + "\nnot a field: 1\n")
        client.upload_file(str(broken), bucket, "repo/add_sub/config.pbtxt")
        server.manager.poll_once()
        assert add_sub(server) == [0.0, 2.0, 4.0, 6.0]
        assert server.service.ready()
    finally:
        server.stop()


def test_explicit_load_reads_the_model_from_the_bucket_again(s3: S3Server, bucket: str) -> None:
    client = s3.client()
    server = start(s3.url(bucket, "repo"), ControlMode.EXPLICIT, load_models=["add_sub"])
    try:
        assert states(server, "add_sub") == {"1": "READY"}
        upload_folder(client, bucket, EXAMPLES / "simple_identity", "repo/simple_identity")
        server.manager.load("simple_identity")
        assert states(server, "simple_identity") == {"1": "READY"}
    finally:
        server.stop()


def test_several_repositories_mix_buckets_and_folders(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    shutil.copytree(EXAMPLES / "simple_identity", local / "simple_identity")
    server = Server(
        ServerSettings([s3.url(bucket, "repo"), local], http_port=0, allow_grpc=False, allow_metrics=False)
    ).start()
    try:
        assert states(server, "add_sub") == {"1": "READY"}
        assert states(server, "simple_identity") == {"1": "READY"}
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("missing bucket", "NoSuchBucket"),
        ("endpoint down", "Could not connect"),
    ],
)
def test_an_unreadable_repository_keeps_the_server_up_and_unready(
    s3: S3Server, bucket: str, case: str, reason: str
) -> None:
    url = (
        s3.url("no-such-bucket", "repo")
        if case == "missing bucket"
        else f"s3://127.0.0.1:{free_port()}/{bucket}"
    )
    began = time.monotonic()
    server = start(url)
    try:
        assert time.monotonic() - began < 60  # every remote call has a timeout
        assert server.service.live()
        assert not server.service.ready()
        errors = server.manager.repository_errors()
        assert list(errors) == [url] and reason in errors[url], errors
    finally:
        server.stop()


def test_a_bucket_that_goes_away_keeps_its_models_serving(bucket: str) -> None:
    with s3_server() as own:
        client = own.client()
        client.create_bucket(Bucket=bucket)
        upload_folder(client, bucket, EXAMPLES / "add_sub", "repo/add_sub")
        server = start(own.url(bucket, "repo"))
    try:  # the S3 server is gone now
        server.manager.poll_once()
        assert add_sub(server) == [0.0, 2.0, 4.0, 6.0]
        assert server.service.ready()  # listed once: it keeps serving what it has
        assert "Could not connect" in server.manager.repository_errors()[own.url(bucket, "repo")]
    finally:
        server.stop()


def test_wrong_credentials_never_report_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    # moto checks signatures once its first unauthenticated requests are spent on setting up a user;
    # the repository is the whole bucket: moto 5.2 miscomputes signatures of listings whose prefix
    # holds a "/" when it checks them
    with s3_server({"INITIAL_NO_AUTH_ACTION_COUNT": "5"}) as own:
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=own.endpoint,
            region_name="us-east-1",
            aws_access_key_id=S3_KEY_ID,
            aws_secret_access_key=S3_SECRET,
        )
        iam.create_user(UserName="triton")
        key = iam.create_access_key(UserName="triton")["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="triton", PolicyName="s3", PolicyDocument=json.dumps(policy))
        client = own.client(key["AccessKeyId"], key["SecretAccessKey"])
        client.create_bucket(Bucket="secured")
        upload_folder(client, "secured", EXAMPLES / "add_sub", "add_sub")
        s3_env(monkeypatch)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
        server = start(own.url("secured"))
        try:
            assert server.service.live() and not server.service.ready()
            assert "InvalidAccessKeyId" in server.manager.repository_errors()[own.url("secured")]
        finally:
            server.stop()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        server = start(own.url("secured"))
        try:
            assert server.service.ready()
        finally:
            server.stop()


def test_the_mount_directory_keeps_a_copy_that_a_restart_reuses(
    s3: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path / "mount"))
    server = start(s3.url(bucket, "repo"), ControlMode.NONE)
    root = mirror(server).root
    assert mirror(server).transfer.objects == 2
    server.stop()
    assert (root / "add_sub" / "1" / "model.py").is_file() and root.is_relative_to(tmp_path / "mount")
    again = start(s3.url(bucket, "repo"), ControlMode.NONE)
    try:
        assert mirror(again).transfer.objects == 0
        assert add_sub(again) == [0.0, 2.0, 4.0, 6.0]
    finally:
        again.stop()


def test_the_temporary_copy_goes_with_the_server(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_AWS_MOUNT_DIRECTORY", raising=False)
    server = start(s3.url(bucket, "repo"), ControlMode.NONE)
    root = mirror(server).root
    assert root.is_dir()
    server.stop()
    assert not root.exists()
