"""Amazon S3 and S3-compatible stores, through boto3 (AWS's own SDK: credentials, regions, retries and
request signing as every AWS tool does them; it is the client Triton's own S3 support mirrors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from server.repository.storage.credentials import s3_credentials
from server.repository.storage.location import RemoteLocation
from server.repository.storage.objects import (
    ATTEMPTS,
    CONNECT_TIMEOUT_S,
    PRESIGN_EXPIRES_S,
    READ_TIMEOUT_S,
    ObjectInfo,
    storage_error,
)


class S3Store:
    def __init__(self, location: RemoteLocation) -> None:
        import boto3
        from botocore.config import Config

        self.location = location
        credentials = s3_credentials(location)
        if credentials.key_id and credentials.secret_key:
            session = boto3.session.Session(
                aws_access_key_id=credentials.key_id,
                aws_secret_access_key=credentials.secret_key,
                aws_session_token=credentials.session_token or None,
                region_name=credentials.region or None,
            )
        else:
            session = boto3.session.Session(
                profile_name=credentials.profile or None, region_name=credentials.region or None
            )
        config = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"max_attempts": ATTEMPTS, "mode": "standard"},
            # an endpoint of our own is addressed by path (bucket after the host), as Triton does
            s3={"addressing_style": "path" if location.endpoint else "auto"},
            signature_version="s3v4",
        )
        region = credentials.region or session.region_name or "us-east-1"
        self._client: Any = session.client(
            "s3", endpoint_url=location.endpoint, config=config, region_name=region
        )

    def list(self, prefix: str) -> list[ObjectInfo]:
        found = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    found.append(ObjectInfo(item["Key"], int(item["Size"]), item["ETag"].strip('"')))
        except Exception as exc:
            raise storage_error(self.location, "list", _reason(exc)) from None
        return found

    def download(self, key: str, target: Path) -> None:
        try:
            self._client.download_file(self.location.bucket, key, str(target))
        except Exception as exc:
            raise storage_error(self._url(key), "download", _reason(exc)) from None

    def presign(self, key: str, expires_s: int = PRESIGN_EXPIRES_S) -> str:
        try:
            return str(
                self._client.generate_presigned_url(
                    "get_object", Params={"Bucket": self.location.bucket, "Key": key}, ExpiresIn=expires_s
                )
            )
        except Exception as exc:
            raise storage_error(self._url(key), "sign a download URL for", _reason(exc)) from None

    def _url(self, key: str) -> str:
        head = f"s3://{self.location.endpoint}/" if self.location.endpoint else "s3://"
        return f"{head}{self.location.bucket}/{key}"


def _reason(exc: Exception) -> str:
    """The store's own words: the S3 error code and message, or the connection failure."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        code = error.get("Code", "")
        message = error.get("Message", "") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
        if code == "404" and not error.get("Message"):
            message = "Not Found"
        if code or message:
            return f"{code}: {message}" if code else str(message)
    return f"{type(exc).__name__}: {exc}"
