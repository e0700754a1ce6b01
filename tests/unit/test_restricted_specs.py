"""--http-restricted-api and --grpc-restricted-protocol specs: what a good one restricts, tritonserver's
words for a bad one, and every RPC of the gRPC service in a group."""

from __future__ import annotations

import pytest
from tritonclient.grpc import service_pb2 as pb

from server.frontends.grpc_restricted import RPC_GROUPS
from server.protocol.restricted import (
    GROUPS,
    Restriction,
    RestrictionSpecError,
    parse_grpc_restricted_protocol,
    parse_http_restricted_api,
    unmatchable_grpc_keys,
)


def test_a_spec_restricts_each_of_its_groups_with_one_header() -> None:
    found = parse_http_restricted_api(["health,metadata:Admin-Key=s3cret", "inference:infer-key=a=b:c"])
    assert found == {
        "health": Restriction("Admin-Key", "s3cret"),
        "metadata": Restriction("Admin-Key", "s3cret"),
        "inference": Restriction("infer-key", "a=b:c"),  # split at the first ':' and the first '=' after it
    }
    assert parse_grpc_restricted_protocol(["model-repository:admin=1"]) == {
        "model-repository": Restriction("triton-grpc-protocol-admin", "1")
    }
    assert parse_http_restricted_api([]) == {}


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (
            ["health"],
            "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health",
        ),
        (["health:key"], "format is '<config name>:<setting>=<value>'. Got health:key"),
        (["health:=v"], "Got health:=v"),
        (["health:k="], "Got health:k="),
        ([":k=v"], "Got :k=v"),
        (["model-reposit,health:k=v"], "unknown restricted api 'model-reposit'"),
        (["Health:k=v"], "unknown restricted api 'Health'"),
        (["health,,metadata:k=v"], "unknown restricted api ''"),
        (
            ["model-repository,health:k1=v1", "metadata,health:k2=v2"],
            "restricted api 'health' can not be specified in multiple config groups",
        ),
    ],
)
def test_a_bad_spec_is_refused_in_tritonservers_words(specs: list[str], message: str) -> None:
    with pytest.raises(RestrictionSpecError) as raised:
        parse_http_restricted_api(specs)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_grpc_errors_name_protocols() -> None:
    with pytest.raises(RestrictionSpecError, match="unknown restricted protocol 'x'"):
        parse_grpc_restricted_protocol(["x:k=v"])
    with pytest.raises(RestrictionSpecError, match="--grpc-restricted-protocol option format"):
        parse_grpc_restricted_protocol(["health"])
    with pytest.raises(RestrictionSpecError, match="protocol 'trace' can not be specified in multiple"):
        parse_grpc_restricted_protocol(["trace:a=1", "trace:a=1"])


def test_a_grpc_key_with_capitals_is_named_as_unmatchable() -> None:
    found = parse_grpc_restricted_protocol(["health:Admin-Key=1", "inference:infer-key=2"])
    assert unmatchable_grpc_keys(found) == ["triton-grpc-protocol-Admin-Key"]


def test_every_rpc_of_the_service_has_a_group() -> None:
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert {method.name for method in service.methods} <= set(RPC_GROUPS)
    assert set(RPC_GROUPS.values()) == set(GROUPS)
