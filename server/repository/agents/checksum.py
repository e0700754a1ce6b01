"""The checksum agent: on LOAD, each parameter `<ALGORITHM>:<file>` names a file of the model folder and
its expected hex digest; a file that does not match fails the load. MD5 is the algorithm Triton's
agent knows, and the only one accepted here too (with its messages), so configs stay portable.

    model_repository_agents { agents [ { name: "checksum",
        parameters { key: "MD5:1/model.onnx" value: "4f0e..." } } ] }
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from server.protocol.errors import ErrorCode, TritonError, invalid_arg
from server.repository.agents.base import Action, AgentModel, ArtifactType, RepositoryAgent

_CHUNK = 1 << 20


class ChecksumAgent(RepositoryAgent):
    name = "checksum"
    accepts = frozenset({ArtifactType.FILESYSTEM})

    def model_action(self, model: AgentModel, action: Action) -> None:
        if action != Action.LOAD:
            return
        for key, expected in model.parameters.items():
            algorithm, separator, relative = key.partition(":")
            if not separator:
                raise invalid_arg(f"failed to parse key: {key}")
            if algorithm.lower() != "md5":
                raise TritonError(ErrorCode.UNSUPPORTED, f"Unsupported checksum algorithm: {algorithm}")
            got = _md5(Path(model.location) / relative, relative)
            if got != expected:
                raise invalid_arg(f"Mismatched MD5 hash for file {relative}, expect: {expected}, got: {got}")


def _md5(path: Path, relative: str) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    try:
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise invalid_arg(
            f"failed to open text file for read {relative}: {os.strerror(exc.errno or 0)}"
        ) from None
    return digest.hexdigest()
