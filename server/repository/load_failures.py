"""How a load that failed is reported, in Triton's words: the versions it leaves UNAVAILABLE with
their reason, and the error the load request answers."""

from __future__ import annotations

import logging

from server.config.model_folder import ModelFolder
from server.protocol.errors import ErrorCode, TritonError, internal
from server.repository.models import ModelState, ServedModel, VersionEntry

log = logging.getLogger("tcli.server")

NO_VERSION = 0  # the stand-in entry carrying the reason of a model with no version to serve


def failed_model(served: ServedModel, folder: ModelFolder, reason: TritonError) -> ServedModel:
    """`served` with every version of `folder` UNAVAILABLE for `reason`."""
    status = reason.status_string()
    served.versions = {v: VersionEntry(v, ModelState.UNAVAILABLE, status) for v in folder.versions}
    if not served.versions:
        served.versions = {NO_VERSION: VersionEntry(NO_VERSION, ModelState.UNAVAILABLE, status)}
    return served


def poll_failed(name: str) -> TritonError:
    return internal(f"failed to load '{name}', failed to poll from model repository")


def load_failure(name: str, model: ServedModel) -> TritonError:
    """Triton's answer to a load that ended with no ready version: a config it could not read is a
    failed poll (INTERNAL); otherwise each failed version with its reason (INVALID_ARG)."""
    if model.config is None:
        log.error("Poll failed for model directory '%s': %s", name, _first_reason(model))
        return poll_failed(name)
    failures = ""
    for version, entry in sorted(model.versions.items()):
        if entry.state == ModelState.READY:
            continue
        if version == NO_VERSION:
            failures += _without_code(entry.reason) + "\n"
        else:
            failures += f"version {version} is at {entry.state} state: {entry.reason};\n"
    return TritonError(
        ErrorCode.INVALID_ARG, f"load failed for model '{name}': {failures or 'no version is available'}"
    )


def refused_reason(model: ServedModel, failure: TritonError) -> str:
    """The index reason of a version that kept serving when a reload of its model failed."""
    why = _first_reason(model) if model.config is None else failure.message
    return f"serving the previous config: its reload failed: {_without_code(why)}"


def _first_reason(model: ServedModel) -> str:
    reasons = [e.reason for e in model.versions.values() if e.reason]
    return reasons[0] if reasons else "no version is available"


def _without_code(reason: str) -> str:
    """The reason without its status code: 'Invalid argument: msg' gives 'msg'."""
    for code in ErrorCode:
        if reason.startswith(f"{code.value}: "):
            return reason[len(code.value) + 2 :]
    return reason
