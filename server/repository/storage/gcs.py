"""Google Cloud Storage, through google-cloud-storage (Google's own client: its credentials chain,
retries and the emulator switch STORAGE_EMULATOR_HOST). Installed with `pip install 'tcli[gcs]'`."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from google.api_core.retry import Retry
from google.cloud import storage

from server.repository.storage.credentials import gcs_credentials
from server.repository.storage.location import RemoteLocation
from server.repository.storage.objects import (
    CONNECT_TIMEOUT_S,
    PRESIGN_EXPIRES_S,
    READ_TIMEOUT_S,
    ObjectInfo,
    storage_error,
)

_TIMEOUT = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
_RETRY = Retry(timeout=2 * READ_TIMEOUT_S)  # transient errors retried, never for longer than this


class GcsStore:
    def __init__(self, location: RemoteLocation) -> None:
        self.location = location
        path = gcs_credentials(location).path
        try:
            if path:
                import google.auth

                credentials, project = google.auth.load_credentials_from_file(
                    path, scopes=["https://www.googleapis.com/auth/devstorage.read_only"]
                )
                self._client: Any = storage.Client(project=project, credentials=credentials)
            else:
                self._client = _default_client()
        except Exception as exc:
            raise storage_error(location, "open", f"{type(exc).__name__}: {exc}") from None
        self._bucket = self._client.bucket(location.bucket)

    def list(self, prefix: str) -> list[ObjectInfo]:
        try:
            blobs = self._client.list_blobs(self._bucket, prefix=prefix, timeout=_TIMEOUT, retry=_RETRY)
            return [
                ObjectInfo(blob.name, int(blob.size or 0), str(blob.etag or blob.md5_hash)) for blob in blobs
            ]
        except Exception as exc:
            raise storage_error(self.location, "list", _reason(exc)) from None

    def download(self, key: str, target: Path) -> None:
        try:
            self._bucket.blob(key).download_to_filename(str(target), timeout=_TIMEOUT, retry=_RETRY)
        except Exception as exc:
            raise storage_error(f"gs://{self.location.bucket}/{key}", "download", _reason(exc)) from None

    def presign(self, key: str, expires_s: int = PRESIGN_EXPIRES_S) -> str:
        try:
            return str(
                self._bucket.blob(key).generate_signed_url(
                    version="v4", expiration=datetime.timedelta(seconds=expires_s), method="GET"
                )
            )
        except Exception as exc:
            raise storage_error(
                f"gs://{self.location.bucket}/{key}",
                "sign a download URL for",
                f"{_reason(exc)} (signing needs a service account key: GOOGLE_APPLICATION_CREDENTIALS)",
            ) from None


def _default_client() -> Any:
    """Google's default credentials, or anonymous access (a public bucket) when there are none."""
    import google.auth.exceptions

    try:
        return storage.Client()
    except google.auth.exceptions.DefaultCredentialsError:
        return storage.Client.create_anonymous_client()


def _reason(exc: Exception) -> str:
    message = getattr(exc, "message", None)
    code = getattr(exc, "code", None)
    if message and code:
        return f"{code} {message}"
    return f"{type(exc).__name__}: {exc}"
