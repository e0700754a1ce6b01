"""The commands a user runs on a bucket: `tcli serve --model-repository=s3://...` (as Triton's
deployment guides write it), `tcli repo validate s3://...` and `tcli repo index s3://...`, against
moto's S3 server on loopback."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import run_tcli
from tests.integration.serve_process import ServeProcess
from tests.object_storage import S3Server, s3_env, s3_server, upload_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    s3_env(monkeypatch)
    with s3_server() as server:
        client = server.client()
        client.create_bucket(Bucket="models")
        upload_folder(client, "models", ROOT / "model_repository" / "add_sub", "repo/add_sub")
        broken = tmp_path / "broken"
        shutil.copytree(
            ROOT / "model_repository" / "add_sub", broken, ignore=shutil.ignore_patterns("__pycache__")
        )
        (broken / "config.pbtxt").write_text(
            (broken / "config.pbtxt").read_text().replace("dims: [ 4 ]", "dims: [ -4 ]", 1)
        )
        upload_folder(client, "models", broken, "bad/add_sub")
        yield server


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_serve_takes_a_bucket_as_tritons_chart_passes_it(s3: S3Server) -> None:
    server = ServeProcess(f"--model-repository={s3.url('models', 'repo')}")
    try:
        assert status(f"http://{server.http_url}/v2/health/ready") == 200
        assert status(f"http://{server.http_url}/v2/models/add_sub/ready") == 200
        assert "add_sub" in server.output() and s3.url("models", "repo") in server.output()
    finally:
        assert server.stop() == 0


def test_serve_exits_on_a_missing_bucket_as_tritonserver_does(s3: S3Server) -> None:
    ports = ("--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")  # the defaults may be taken
    result = run_tcli("serve", "--model-repository", s3.url("no-such-bucket", "repo"), *ports)
    assert result.returncode == 1
    assert "NoSuchBucket" in result.stderr and "failed to load all models" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_stays_up_and_unready_on_a_missing_bucket_and_says_why(s3: S3Server) -> None:
    url = s3.url("no-such-bucket", "repo")
    server = ServeProcess("--model-repository", url, "--exit-on-error=false")
    try:
        assert status(f"http://{server.http_url}/v2/health/live") == 200
        assert status(f"http://{server.http_url}/v2/health/ready") == 400
        output = server.output()
        assert f"(repository) {url}" in output and "NoSuchBucket" in output
        assert "Traceback" not in output
    finally:
        server.stop()


def test_a_malformed_bucket_path_is_one_line() -> None:
    result = run_tcli("serve", "--model-repository", "s3://https://models/repo")
    assert result.returncode != 0
    assert "host:port" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_validate_reads_a_bucket_and_names_files_by_their_bucket_path(s3: S3Server) -> None:
    good = run_tcli("repo", "validate", s3.url("models", "repo"))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "add_sub" in good.stdout
    bad = run_tcli("repo", "validate", s3.url("models", "bad"), "--format", "json")
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    [problem] = [p for m in report["models"] for p in m["problems"] if p["severity"] == "error"]
    assert problem["file"] == s3.url("models", "bad") + "/add_sub/config.pbtxt"
    assert report["repositories"] == [s3.url("models", "bad")]


def test_validate_names_a_bucket_it_cannot_read(s3: S3Server) -> None:
    result = run_tcli("repo", "validate", s3.url("no-such-bucket"))
    assert result.returncode == 1
    assert "NoSuchBucket" in result.stdout and "Traceback" not in result.stdout + result.stderr


def test_index_lists_a_bucket(s3: S3Server) -> None:
    result = run_tcli("repo", "index", s3.url("models", "repo"), "--format", "json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert (row["name"], row["versions"], row["repository"]) == ("add_sub", ["1"], s3.url("models", "repo"))
