"""InferParameter values of the gRPC inference messages and what Triton reads from them: a request's
model version string, its request parameters (sequence, priority, timeout, the reserved `triton_`
keys) and the shared memory region a tensor names. Checks and messages follow Triton's gRPC front end
(server/src/grpc/infer_handler.cc, grpc_utils.h); every failure is INVALID_ARG.
"""

from __future__ import annotations

from typing import Any

from server.protocol.errors import invalid_arg

RESERVED_REQUEST_PARAMETERS = ("triton_enable_empty_final_response",)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MOD = 2**64


# ------------------------------------------------------------------------------------------ numbers
def _leading_integer(text: str) -> int | None:
    """The integer std::stol/stoi read at the start of `text` (leading whitespace, an optional sign,
    digits; the rest is ignored), or None when there is none."""
    stripped = text.lstrip(" \t\n\v\f\r")
    end = 1 if stripped[:1] in ("+", "-") else 0
    while end < len(stripped) and stripped[end].isdigit() and stripped[end].isascii():
        end += 1
    digits = stripped[:end]
    if not digits or digits in ("+", "-"):
        return None
    return int(digits)


def model_version(version: str) -> str:
    """The model version a request names, as the core takes it ("" = the latest ready one); Triton's
    GetModelVersionFromString rules and messages."""
    if not version:
        return ""
    number = _leading_integer(version)
    if number is None or not _INT64_MIN <= number <= _INT64_MAX:
        raise invalid_arg(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            "version should be an integral value > 0"
        )
    if number < 0:
        raise invalid_arg(
            f"invalid model version specified '{version}' , version should be an integral value > 0"
        )
    return str(number)


# ------------------------------------------------------------------------------------------ parameters
def parameter_value(parameter: Any) -> Any:
    """The Python value of an InferParameter (None when no value is set)."""
    which = parameter.WhichOneof("parameter_choice")
    return None if which is None else getattr(parameter, which)


def set_parameter(parameter: Any, value: Any) -> None:
    """Fill an InferParameter from a Python value."""
    if isinstance(value, bool):
        parameter.bool_param = value
    elif isinstance(value, int):
        if value > _INT64_MAX:
            parameter.uint64_param = value
        else:
            parameter.int64_param = value
    elif isinstance(value, float):
        parameter.double_param = value
    else:
        parameter.string_param = str(value)


def request_parameters(parameters: Any) -> tuple[dict[str, Any], bool]:
    """Request parameters for the core, and the triton_enable_empty_final_response flag."""
    result: dict[str, Any] = {}
    empty_final = False
    for key, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if key == "sequence_id":
            if which == "int64_param":
                value = parameter.int64_param
                result[key] = value if value >= 0 else value + _UINT64_MOD  # Triton keeps it as uint64
            elif which == "string_param":
                result[key] = parameter.string_param
            else:
                raise invalid_arg(
                    "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
                )
        elif key in ("sequence_start", "sequence_end"):
            if which != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            result[key] = parameter.bool_param
        elif key == "priority":
            if which == "int64_param":
                if parameter.int64_param < 0:
                    raise invalid_arg("invalid value for 'priority', expected value >= 0.")
                result[key] = parameter.int64_param
            elif which == "uint64_param":
                result[key] = parameter.uint64_param
            else:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
                )
        elif key == "timeout":
            if which != "int64_param":
                raise invalid_arg("invalid value type for 'timeout' parameter, expected int64_param.")
            result[key] = parameter.int64_param
        elif key.startswith("triton_"):
            if key not in RESERVED_REQUEST_PARAMETERS:
                raise invalid_arg(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                    "following keys starting with 'triton_' are allowed: "
                    + " ".join(RESERVED_REQUEST_PARAMETERS)
                )
            if which != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            empty_final = parameter.bool_param
        elif which in ("int64_param", "bool_param", "string_param", "double_param"):
            # double_param as Triton 2.51 takes it (its error message still names the other three)
            result[key] = getattr(parameter, which)
        else:
            raise invalid_arg(
                f"invalid value type for '{key}' parameter, expected int64_param, bool_param, or "
                "string_param."
            )
    return result, empty_final


def shared_memory_parameters(tensor: Any) -> tuple[str, int, int] | None:
    """(region, offset, byte size) when a tensor's parameters name a shared memory region; Triton's
    ParseSharedMemoryParams checks and messages."""
    parameters = tensor.parameters
    region: str | None = None
    if "shared_memory_region" in parameters:
        parameter = parameters["shared_memory_region"]
        if parameter.WhichOneof("parameter_choice") != "string_param":
            raise invalid_arg(
                f"invalid value type for 'shared_memory_region' parameter for tensor '{tensor.name}', "
                "expected string_param."
            )
        region = parameter.string_param
    offset = 0
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key not in parameters:
            continue
        if region is None:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor "
                f"'{tensor.name}'"
            )
        parameter = parameters[key]
        if parameter.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{tensor.name}', expected int64_param."
            )
        if key == "shared_memory_offset":
            offset = parameter.int64_param
    if region is None:
        return None
    if "shared_memory_byte_size" not in parameters:
        raise invalid_arg(
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter "
            f"for tensor '{tensor.name}'"
        )
    byte_size = parameters["shared_memory_byte_size"].int64_param
    if offset < 0 or byte_size < 0:
        raise invalid_arg(
            f"invalid shared memory offset or byte size for tensor '{tensor.name}': expected values >= 0"
        )
    return region, offset, byte_size
