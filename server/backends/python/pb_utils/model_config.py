"""The model configuration as a model sees it: lookups in the dict `json.loads(args["model_config"])`
gives, and ModelConfig, what `auto_complete_config` receives and returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

# ---------------------------------------------------------------------------------------------------
# Model config helpers (the config is the dict json.loads(args["model_config"]) gives)
# ---------------------------------------------------------------------------------------------------


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("input", []):
        if properties.get("name") == name:
            return properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for properties in model_config.get("output", []):
        if properties.get("name") == name:
            return properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


# ---------------------------------------------------------------------------------------------------
# ModelConfig: what auto_complete_config receives and returns
# ---------------------------------------------------------------------------------------------------


def _int_list(values: Iterable[Any]) -> list[Any]:
    """dims as numbers (protobuf's JSON printer writes int64 as strings; Triton's JSON has numbers)."""
    out: list[Any] = []
    for v in values:
        try:
            out.append(int(v))
        except (TypeError, ValueError):
            out.append(v)
    return out


class ModelConfig:
    """The model configuration handed to `TritonPythonModel.auto_complete_config`.

    Built from Triton's JSON form of ModelConfig (a JSON string, as Triton passes it, or a dict).
    Errors are ValueErrors with Triton's wording."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        if isinstance(model_config, str):
            config = json.loads(model_config)
        else:
            config = json.loads(json.dumps(model_config))  # a private deep copy of plain JSON types
        if not isinstance(config, dict):
            raise TypeError("ModelConfig(): expected a JSON object")
        # Triton's JSON always carries these; a sparse dict (MessageToDict without defaults) may not
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        for section in ("input", "output"):
            entries = config.setdefault(section, [])
            for entry in entries:
                if "dims" in entry:
                    entry["dims"] = _int_list(entry["dims"])
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function "
                f"for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but auto-complete-config "
                    f"function for model '{self._name}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, section: str, tensor: dict[str, Any], valid: tuple[str, ...]) -> None:
        model = self._name
        for prop in tensor:
            if prop not in valid:
                allowed = ", ".join(f"'{p}'" for p in valid[:-1]) + f" and '{valid[-1]}'"
                raise ValueError(
                    f"{section} '{tensor.get('name', '')}' in auto-complete-config function for model '{model}' "
                    f"contains property other than {allowed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{section} in auto-complete-config function for model '{model}' is missing 'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    f"{section} '{tensor['name']}' in auto-complete-config function for model '{model}' "
                    f"is missing '{prop}' property."
                )
        new = dict(tensor)
        new["dims"] = _int_list(new["dims"])
        for current in self._model_config[section]:
            if current.get("name") != new["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            current_dims = current.get("dims") or []
            if current_type != "TYPE_INVALID" and current_type != new["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype {current_type} for "
                    f"{section} '{new['name']}', model provides {new['data_type']}"
                )
            if current_dims and current_dims != new["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{new['name']}': the model expects dims {new['dims']} but the "
                    f"model configuration specifies dims {current_dims}"
                )
            if "optional" in current and "optional" in new and current["optional"] != new["optional"]:
                raise ValueError(
                    f"model '{model}', tensor '{new['name']}': the model expects optional {new['optional']} "
                    f"but the model configuration specifies optional {current['optional']}"
                )
            current["data_type"] = new["data_type"]
            current["dims"] = new["dims"]
            if "optional" in new:
                current["optional"] = new["optional"]
            return
        self._model_config[section].append(new)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model '{self._name}' "
                    "contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model '{self._name}', "
                    f"which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
