"""What tcli asks of an object store, whichever cloud it is: list the objects under a prefix, download
one to a file, and sign a URL that downloads one without credentials (for the dragonfly agent). Each
cloud's client (s3.py, gcs.py, azure.py) implements `ObjectStore`; `stores.open_store` picks one and
imports its SDK only then.

Every call has a timeout (connect and read), and every failure is a TritonError that names the
location, what was being done and the store's own reason, so it can be shown as a model's reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from server.protocol.errors import ErrorCode, TritonError
from server.repository.storage.location import RemoteLocation

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
ATTEMPTS = 3  # each call, transient failures included
PRESIGN_EXPIRES_S = 3600


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # the full object key
    size: int
    etag: str  # changes whenever the content does (an MD5 on S3 for single-part uploads)


class ObjectStore(Protocol):
    location: RemoteLocation  # the repository this store was opened for

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (a folder's prefix ends with "/"), in any order."""

    def download(self, key: str, target: Path) -> None:
        """Write the object to `target` (its folder exists)."""

    def presign(self, key: str, expires_s: int = PRESIGN_EXPIRES_S) -> str:
        """A URL that GETs the object without further credentials, valid for `expires_s`."""


def storage_error(location: RemoteLocation | str, action: str, reason: str) -> TritonError:
    return TritonError(ErrorCode.UNAVAILABLE, f"failed to {action} {location}: {reason}")
