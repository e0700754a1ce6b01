"""Credentials for object storage, found where Triton looks for them.

First the JSON file named by TRITON_CLOUD_CREDENTIAL_PATH: a section per scheme ("s3", "gs", "as"),
each keyed by a path prefix ("" matches every path); the longest key that starts the repository path
wins. Without that file, or without a matching key, the environment: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, AWS_PROFILE (then boto3's own chain:
~/.aws, instance roles); GOOGLE_APPLICATION_CREDENTIALS (then Google's default credentials);
AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY. AZURE_STORAGE_CONNECTION_STRING, the Azure SDK's own
variable, is honoured too: it can name another blob endpoint (Azurite, sovereign clouds).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.protocol.errors import invalid_arg
from server.repository.storage.location import RemoteLocation

CREDENTIAL_PATH_VARIABLE = "TRITON_CLOUD_CREDENTIAL_PATH"


@dataclass(frozen=True)
class S3Credentials:
    key_id: str = ""
    secret_key: str = ""
    session_token: str = ""
    region: str = ""
    profile: str = ""


@dataclass(frozen=True)
class GcsCredentials:
    path: str = ""  # a service-account or authorized-user JSON file; "" for Google's default chain


@dataclass(frozen=True)
class AzureCredentials:
    account: str = ""
    key: str = ""
    connection_string: str = ""


def s3_credentials(location: RemoteLocation) -> S3Credentials:
    entry = _from_file(location)
    if isinstance(entry, dict):
        return S3Credentials(
            key_id=_text(entry, "key_id"),
            secret_key=_text(entry, "secret_key"),
            session_token=_text(entry, "session_token"),
            region=_text(entry, "region"),
            profile=_text(entry, "profile"),
        )
    env = os.environ
    return S3Credentials(
        key_id=env.get("AWS_ACCESS_KEY_ID", ""),
        secret_key=env.get("AWS_SECRET_ACCESS_KEY", ""),
        session_token=env.get("AWS_SESSION_TOKEN", ""),
        region=env.get("AWS_DEFAULT_REGION", "") or env.get("AWS_REGION", ""),
        profile=env.get("AWS_PROFILE", ""),
    )


def gcs_credentials(location: RemoteLocation) -> GcsCredentials:
    entry = _from_file(location)
    if isinstance(entry, str):
        return GcsCredentials(entry)
    return GcsCredentials(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", ""))


def azure_credentials(location: RemoteLocation) -> AzureCredentials:
    entry = _from_file(location)
    if isinstance(entry, dict):
        return AzureCredentials(_text(entry, "account_str"), _text(entry, "account_key"))
    env = os.environ
    return AzureCredentials(
        env.get("AZURE_STORAGE_ACCOUNT", ""),
        env.get("AZURE_STORAGE_KEY", ""),
        env.get("AZURE_STORAGE_CONNECTION_STRING", ""),
    )


def _from_file(location: RemoteLocation) -> Any:
    """The credential file's entry for `location` (longest matching key), or None."""
    path = os.environ.get(CREDENTIAL_PATH_VARIABLE)
    if not path:
        return None
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise invalid_arg(
            f"cannot read the cloud credential file {path} ({CREDENTIAL_PATH_VARIABLE}): {exc}; "
            "fix the file or unset the variable to use the environment's credentials"
        ) from None
    section = document.get(location.scheme) if isinstance(document, dict) else None
    if not isinstance(section, dict):
        return None
    matches = [key for key in section if location.url.startswith(key)]
    return section[max(matches, key=len)] if matches else None


def _text(entry: dict[str, Any], key: str) -> str:
    value = entry.get(key, "")
    return value if isinstance(value, str) else ""
