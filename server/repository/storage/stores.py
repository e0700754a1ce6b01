"""The store for a location: the client of its cloud, whose SDK is imported only now."""

from __future__ import annotations

from server.protocol.errors import ErrorCode, TritonError
from server.repository.storage.location import RemoteLocation
from server.repository.storage.objects import ObjectStore


def open_store(location: RemoteLocation) -> ObjectStore:
    """A client for the location's cloud; a missing optional SDK is named with the extra to install."""
    if location.scheme == "s3":
        from server.repository.storage.s3 import S3Store

        return S3Store(location)
    if location.scheme == "gs":
        try:
            from server.repository.storage.gcs import GcsStore
        except ImportError:
            raise _missing("google-cloud-storage", "gcs", location) from None
        return GcsStore(location)
    try:
        from server.repository.storage.azure import AzureStore
    except ImportError:
        raise _missing("azure-storage-blob", "azure", location) from None
    return AzureStore(location)


def _missing(package: str, extra: str, location: RemoteLocation) -> TritonError:
    return TritonError(
        ErrorCode.UNAVAILABLE,
        f"serving {location} needs the {package} package: pip install 'tcli[{extra}]'",
    )
