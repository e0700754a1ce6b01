"""Scenario 6 [storage], a repository in object storage: the python example models in a bucket on moto's
S3 server on loopback, which records every request it receives.
(a) Cold start: `tcli serve --model-repository=s3://...` and real Triton 2.51 on the same bucket, from
launch until /v2/health/ready answers 200, alternated, median of 3 (--quick: 1): tcli / Triton <= 1.00,
no slower than Triton (issue 27).
Each launch copies the bucket afresh (no mount directory), as a new pod does.
(b) The same bucket, unchanged, polled every second for 60 s (--quick: 15 s) by each server: the object
downloads the S3 server saw after the server was ready (target for tcli: 0), beside its listings."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.context import Context
from benchmarks.harness import Server, log, start_tcli, start_triton
from benchmarks.repos import copy_examples
from benchmarks.table import Row, ratio

BUCKET, PREFIX = "models", "repo"
KEY_ID, SECRET = "bench-key", "bench-secret"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _s3(workdir: Path) -> Iterator[tuple[str, Path]]:
    """moto's S3 server with request recording on; (endpoint, recording file)."""
    moto = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    port = _free_port()
    recording = workdir / "s3-requests.jsonl"
    env = {**os.environ, "MOTO_ENABLE_RECORDING": "true", "MOTO_RECORDER_FILEPATH": str(recording)}
    process = subprocess.Popen(
        [moto, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", recording
    finally:
        process.terminate()
        process.wait(10)


def _upload(endpoint: str, repo: Path) -> int:
    import boto3

    client: Any = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    count = 0
    for path in sorted(repo.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            client.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(repo).as_posix()}")
            count += 1
    return count


def _requests(recording: Path, since: int) -> tuple[int, int]:
    """(object downloads, listings) the S3 server recorded after byte offset `since` of its recording."""
    downloads = listings = 0
    with recording.open() as file:
        file.seek(since)
        for line in file:
            entry = json.loads(line)
            if entry["method"] != "GET" or f"/{BUCKET}" not in entry["url"]:
                continue
            if "list-type=2" in entry["url"]:
                listings += 1
            elif f"/{BUCKET}/" in entry["url"]:
                downloads += 1
    return downloads, listings


@contextlib.contextmanager
def _credentials() -> Iterator[None]:
    saved = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("TRITON_AWS_MOUNT_DIRECTORY", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def rows(ctx: Context) -> list[Row]:
    repo = ctx.workdir / "storage-repo"
    copy_examples(repo)
    with _credentials(), _s3(ctx.workdir) as (endpoint, recording):
        objects = _upload(endpoint, repo)
        url = f"s3://{endpoint.removeprefix('http://')}/{BUCKET}/{PREFIX}"
        return [_cold_start(ctx, url, objects), *_polling(ctx, url, recording)]


def _cold_start(ctx: Context, url: str, objects: int) -> Row:
    runs = ctx.pick(3, 1)
    log(f"storage: cold start from {url}, tcli and Triton alternated, {runs} time(s) each")
    times: dict[str, list[float]] = {"tcli": [], "triton": []}
    for round_ in range(runs):
        order = ("tcli", "triton") if round_ % 2 == 0 else ("triton", "tcli")
        for name in order:
            path = ctx.workdir / f"storage-{name}-{round_}.log"
            server = start_tcli([url], path) if name == "tcli" else start_triton(url, path)
            try:
                times[name].append(server.wait())
            finally:
                server.stop()
    ours, theirs = statistics.median(times["tcli"]), statistics.median(times["triton"])
    value = ratio(ours, theirs)
    return Row(
        "6a python examples from S3 (moto, loopback): launch to ready",
        f"{ours:.2f} s",
        f"{theirs:.2f} s",
        value,
        "<= 1.00",
        None if value is None else value <= 1.0,
        f"{objects} objects in the bucket; median of {runs} alternated launches each; tcli "
        + ", ".join(f"{t:.2f}" for t in times["tcli"])
        + " s, Triton "
        + ", ".join(f"{t:.2f}" for t in times["triton"])
        + " s; every launch copies the bucket afresh",
        runs=times,
    )


def _polling(ctx: Context, url: str, recording: Path) -> list[Row]:
    seconds = ctx.pick(60, 15)
    found: dict[str, tuple[int, int]] = {}
    for name in ("tcli", "triton"):
        log(f"storage: {name} polls the unchanged bucket every second for {seconds} s")
        path = ctx.workdir / f"storage-poll-{name}.log"
        if name == "tcli":
            server: Server = start_tcli(
                [url], path, extra=("--model-control-mode", "poll", "--repository-poll-secs", "1")
            )
        else:
            server = start_triton(url, path, extra=("--model-control-mode=poll", "--repository-poll-secs=1"))
        try:
            server.wait()
            since = recording.stat().st_size
            time.sleep(seconds)  # the span being measured, not a wait for a condition
            found[name] = _requests(recording, since)
        finally:
            server.stop()
    (ours, our_lists), (theirs, their_lists) = found["tcli"], found["triton"]
    return [
        Row(
            f"6b unchanged bucket polled each second for {seconds} s: objects downloaded",
            f"{ours} ({our_lists} listings)",
            f"{theirs} ({their_lists} listings)",
            None,
            "tcli 0",
            ours == 0,
            "counted by the S3 server's request recording, from when each server was ready; "
            "tcli lists the bucket once per poll and compares ETags",
        )
    ]
