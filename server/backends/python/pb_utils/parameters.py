"""Parameters: requests and responses carry {str: bool | int | str}, shown to models as a JSON string."""

from __future__ import annotations

import json

from server.backends.python.pb_utils.errors import TritonModelException


def _parameters_json(parameters: object) -> tuple[dict[str, bool | int | str], str]:
    if parameters is None:
        return {}, "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters), json.dumps(parameters)
