"""Where a model repository lives, in Triton's syntax: a local folder, or a path in object storage.

    /models, ./models                       a local folder
    s3://bucket/path                        Amazon S3 (region and credentials from the environment)
    s3://host:port/bucket/path              an S3-compatible endpoint over HTTP (MinIO, Ceph, moto)
    s3://http://host:port/bucket/path       the same, said explicitly
    s3://https://host:port/bucket/path      ... over HTTPS
    gs://bucket/path                        Google Cloud Storage
    as://account/container/path             Azure Blob Storage

Slashes are normalised as Triton does (repeated ones collapse, leading and trailing ones go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from server.protocol.errors import invalid_arg

SCHEMES = ("s3", "gs", "as")
# Triton's own pattern for an S3 path that names an endpoint (host:port), with the bucket rules of S3
_S3_ENDPOINT = re.compile(r"(http://|https://|)([0-9a-zA-Z\-.]+):([0-9]+)/([0-9a-z.\-]+)((?:/.*)?)")


@dataclass(frozen=True)
class RemoteLocation:
    """A repository (or a model folder) in object storage."""

    scheme: str  # "s3", "gs" or "as"
    bucket: str  # the bucket; for Azure, the container
    prefix: str  # the object path inside it, without leading or trailing "/" ("" for the whole bucket)
    endpoint: str | None = None  # S3-compatible endpoint URL ("http://127.0.0.1:9000"), None for AWS
    account: str = ""  # Azure storage account
    url: str = ""  # as the user wrote it, slashes normalised: what credential file keys are matched against

    def child(self, name: str) -> RemoteLocation:
        """The location of `name` inside this one (a model folder in a repository)."""
        prefix = f"{self.prefix}/{name}" if self.prefix else name
        return RemoteLocation(
            self.scheme, self.bucket, prefix, self.endpoint, self.account, f"{self.url}/{name}"
        )

    def key(self, relative: str) -> str:
        """The object key of a path relative to this location."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def __str__(self) -> str:
        return self.url


def is_remote(text: str | Path) -> bool:
    return isinstance(text, str) and text.split("://", 1)[0] in SCHEMES and "://" in text


def parse_location(text: str | Path) -> Path | RemoteLocation:
    """A local folder as a Path, or a RemoteLocation; raises INVALID_ARG for a malformed remote path."""
    if not is_remote(text):
        return Path(text)
    assert isinstance(text, str)
    scheme, rest = text.split("://", 1)
    if scheme == "s3":
        return _parse_s3(text, rest)
    parts = _segments(rest)
    url = f"{scheme}://" + "/".join(parts)
    if scheme == "gs":
        if not parts:
            raise invalid_arg(f"No bucket name found in path: {text}")
        return RemoteLocation("gs", parts[0], "/".join(parts[1:]), url=url)
    if len(parts) < 2:
        raise invalid_arg(
            f"Invalid Azure Storage path '{text}': expected as://<account>/<container>[/<path>]"
        )
    return RemoteLocation("as", parts[1], "/".join(parts[2:]), account=parts[0], url=url)


def _parse_s3(text: str, rest: str) -> RemoteLocation:
    scheme = ""
    for prefix in ("https://", "http://"):
        if rest.startswith(prefix):
            scheme, rest = prefix, rest[len(prefix) :]
            break
    parts = _segments(rest)
    if not parts:
        raise invalid_arg(f"Invalid bucket name: '{rest}'")
    url = "s3://" + scheme + "/".join(parts)
    match = _S3_ENDPOINT.fullmatch(scheme + "/".join(parts))
    if match is not None:
        protocol, host, port, bucket, tail = match.groups()
        endpoint = f"{protocol or 'http://'}{host}:{port}"
        return RemoteLocation("s3", bucket, tail.strip("/"), endpoint, url=url)
    if scheme or ":" in parts[0]:
        raise invalid_arg(
            f"Invalid S3 path '{text}': an endpoint is written s3://[http://|https://]host:port/bucket/path"
        )
    return RemoteLocation("s3", parts[0], "/".join(parts[1:]), url=url)


def _segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]
