"""Azure Blob Storage, through azure-storage-blob (Microsoft's own client: shared-key and SAS
signing, retries). Installed with `pip install 'tcli[azure]'`."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from azure.storage.blob import BlobSasPermissions, BlobServiceClient, generate_blob_sas

from server.repository.storage.credentials import azure_credentials
from server.repository.storage.location import RemoteLocation
from server.repository.storage.objects import (
    ATTEMPTS,
    CONNECT_TIMEOUT_S,
    PRESIGN_EXPIRES_S,
    READ_TIMEOUT_S,
    ObjectInfo,
    storage_error,
)

_CLIENT_OPTIONS: dict[str, Any] = {
    "connection_timeout": CONNECT_TIMEOUT_S,
    "read_timeout": READ_TIMEOUT_S,
    "retry_total": ATTEMPTS,
}


class AzureStore:
    def __init__(self, location: RemoteLocation) -> None:
        self.location = location
        credentials = azure_credentials(location)
        self._account_key = credentials.key
        try:
            if (
                credentials.connection_string
                and _account_of(credentials.connection_string) == location.account
            ):
                service: Any = BlobServiceClient.from_connection_string(
                    credentials.connection_string, **_CLIENT_OPTIONS
                )
                self._account_key = self._account_key or _field(credentials.connection_string, "AccountKey")
            else:
                url = f"https://{location.account}.blob.core.windows.net"
                key = (
                    {"account_name": location.account, "account_key": credentials.key}
                    if credentials.key
                    else None
                )
                service = BlobServiceClient(url, credential=key, **_CLIENT_OPTIONS)
        except Exception as exc:
            raise storage_error(location, "open", f"{type(exc).__name__}: {exc}") from None
        self._container: Any = service.get_container_client(location.bucket)

    def list(self, prefix: str) -> list[ObjectInfo]:
        try:
            return [
                ObjectInfo(blob.name, int(blob.size), str(blob.etag).strip('"'))
                for blob in self._container.list_blobs(name_starts_with=prefix)
            ]
        except Exception as exc:
            raise storage_error(self.location, "list", _reason(exc)) from None

    def download(self, key: str, target: Path) -> None:
        try:
            with target.open("wb") as file:
                self._container.download_blob(key).readinto(file)
        except Exception as exc:
            raise storage_error(self._url(key), "download", _reason(exc)) from None

    def presign(self, key: str, expires_s: int = PRESIGN_EXPIRES_S) -> str:
        if not self._account_key:
            raise storage_error(self._url(key), "sign a download URL for", "signing needs AZURE_STORAGE_KEY")
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_s)
        token = generate_blob_sas(
            self.location.account,
            self.location.bucket,
            key,
            account_key=self._account_key,
            permission=BlobSasPermissions(read=True),
            expiry=expiry,
        )
        return f"{self._container.get_blob_client(key).url}?{token}"

    def _url(self, key: str) -> str:
        return f"as://{self.location.account}/{self.location.bucket}/{key}"


def _field(connection_string: str, name: str) -> str:
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip() == name:
            return value.strip()
    return ""


def _account_of(connection_string: str) -> str:
    return _field(connection_string, "AccountName")


def _reason(exc: Exception) -> str:
    code = getattr(exc, "error_code", None)
    code = getattr(code, "value", code)  # StorageErrorCode.X -> its service name ("AuthorizationFailure")
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{code}: {message}" if code else f"{type(exc).__name__}: {message}"
