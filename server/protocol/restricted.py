"""Restricted APIs, as tritonserver's --http-restricted-api and --grpc-restricted-protocol set them:
groups of endpoints (RPCs) that answer only requests carrying a given header (gRPC metadata) with a
given value.

A spec is `<group>[,<group>...]:<header>=<value>`; flags repeat, and a group may be restricted by one
spec only. The groups are Triton's; which endpoint belongs to which is each front end's routing
(server/frontends/http/app.py, server/frontends/grpc.py). As in Triton, a header name is matched without
regard to case on HTTP; on gRPC the metadata key is `triton-grpc-protocol-<header>` exactly as
written (clients send keys in lower case, so a key written with capitals never matches); a value
must match exactly. A refused call is answered before anything else about it is checked: HTTP 403
{"error": "This API is restricted, expecting header '<header>'"}, gRPC UNAVAILABLE "This protocol is
restricted, expecting header 'triton-grpc-protocol-<header>'".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"


class Restriction(NamedTuple):
    """The header (gRPC: full metadata key) a restricted group's requests must carry, and its value."""

    header: str
    value: str


Restrictions = Mapping[str, Restriction]  # group -> its restriction; a group not in it is open


class RestrictionSpecError(ValueError):
    """A spec tritonserver would refuse; the message is the one line to show."""


def parse_http_restricted_api(specs: Iterable[str]) -> dict[str, Restriction]:
    """The groups --http-restricted-api restricts, from its values."""
    return _parse(specs, "http-restricted-api", "api", "")


def parse_grpc_restricted_protocol(specs: Iterable[str]) -> dict[str, Restriction]:
    """The groups --grpc-restricted-protocol restricts, from its values (keys get Triton's prefix)."""
    return _parse(specs, "grpc-restricted-protocol", "protocol", GRPC_HEADER_PREFIX)


def _parse(specs: Iterable[str], option: str, kind: str, prefix: str) -> dict[str, Restriction]:
    found: dict[str, Restriction] = {}
    for spec in specs:
        # tritonserver splits at the first ':' and the first '=' after it; all three parts are needed
        names, colon, setting = spec.partition(":")
        header, equals, value = setting.partition("=")
        if not (colon and equals and names and header and value):
            raise RestrictionSpecError(
                f"--{option} option format is '<config name>:<setting>=<value>'. Got {spec} "
                f"(write <{kind}>[,<{kind}>...]:<header>=<value>, e.g. inference:infer-key=secret)"
            )
        for group in names.split(","):
            if group not in GROUPS:
                raise RestrictionSpecError(
                    f"unknown restricted {kind} '{group}' in --{option}={spec} (one of: {', '.join(GROUPS)})"
                )
            if group in found:
                raise RestrictionSpecError(
                    f"restricted {kind} '{group}' can not be specified in multiple config groups "
                    f"(--{option}={spec}): name each {kind} in one --{option} only"
                )
            found[group] = Restriction(prefix + header, value)
    return found


def http_refusal(restriction: Restriction) -> str:
    return f"This API is restricted, expecting header '{restriction.header}'"


def grpc_refusal(restriction: Restriction) -> str:
    return f"This protocol is restricted, expecting header '{restriction.header}'"


def unmatchable_grpc_keys(restrictions: Restrictions) -> list[str]:
    """Metadata keys written with capitals: gRPC clients send keys in lower case, so no call can
    carry them (Triton refuses every call of such a group; worth a warning)."""
    return sorted({r.header for r in restrictions.values() if r.header != r.header.lower()})
