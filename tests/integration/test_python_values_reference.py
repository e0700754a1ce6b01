"""The python values of test_python_values.py against the real Triton 2.51: what a model answers with
and what a client sends reach the other side as they do on Triton, for every value Triton 2.51 takes
(no response parameters, which 2.51 lacks; no BF16 made through torch, which its stub's environment
lacks; no array of non-native byte order, which it refuses: README, Deliberate differences).

tcli serves the repository as by default (instances in processes of their own); the other path is
held to this one by test_python_values.py. Errors are compared by their status and their first
line: Triton's `At:` also lists its own helpers' frames. Triton's strings end at a NUL (its C
strings): the strings a client sends here have none, an error's text is compared up to one. Nor
does a client send float parameters here: Triton's JSON parser may change their last digit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from hypothesis import given
from hypothesis import strategies as st

from tests.integration.python_values_repository import DATATYPES, write_repository
from tests.integration.serve_process import ServeProcess
from tests.integration.test_python_values import (
    _KINDS,
    _LAYOUTS,
    _PARAMETERS,
    VALUES,
    Answer,
    _infer,
    _spec_input,
    answers,
    check,
    client_inputs,
    requested,
)
from tests.reference import RealTriton, require_reference_triton

pytestmark = pytest.mark.reference

KINDS = tuple(k for k in _KINDS if k != "BF16")
LAYOUTS = tuple(layout for layout in _LAYOUTS if layout != "big_endian")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """host:port of real Triton and of tcli, serving the same repository."""
    binary = require_reference_triton()
    repository = write_repository(tmp_path_factory.mktemp("values") / "models")
    with RealTriton(binary, repository) as triton:
        tcli = ServeProcess(str(repository))
        try:
            yield {"triton": triton.http_address, "tcli": tcli.http_url}
        finally:
            tcli.stop()


def _first_line(answer: Answer) -> Answer:
    """An error's status and text before `At:`, up to a NUL (Triton's C strings end there)."""
    if answer[0] == "error":
        return (*answer[:2], answer[2].split("\n\nAt:\n")[0].split("\x00")[0])
    return answer


def _alike(servers: dict[str, str], *args: Any, **kwargs: Any) -> Answer:
    answers = {name: _infer(url, *args, **kwargs) for name, url in servers.items()}
    if _first_line(answers["tcli"]) != _first_line(answers["triton"]):
        seen = {name: a[2].get("SEEN") if a[0] == "ok" else None for name, a in answers.items()}
        raise AssertionError(f"{answers}\nSEEN: {seen}")
    return answers["tcli"]


@VALUES
@given(spec=answers(KINDS, LAYOUTS, parameters=False))
def test_what_a_model_answers_with_reaches_the_client_as_on_triton(
    servers: dict[str, str], spec: dict[str, Any]
) -> None:
    answer = _alike(servers, "values", _spec_input(spec), requested(spec))
    check(answer, spec)


def _no_nul(value: Any) -> Any:
    return value.replace("\x00", "") if isinstance(value, str) else value


@VALUES
@given(
    tensors=client_inputs(tuple(d for d in DATATYPES if d != "BF16")),
    parameters=_PARAMETERS.map(lambda p: {k: _no_nul(v) for k, v in p.items()}),
    request_id=st.text(max_size=8).map(_no_nul),
)
def test_what_a_client_sends_reaches_the_model_as_on_triton(
    servers: dict[str, str],
    tensors: list[tuple[str, np.ndarray[Any, Any]]],
    parameters: dict[str, Any],
    request_id: str,
) -> None:
    inputs = []
    for datatype, array in tensors:
        tensor = httpclient.InferInput(f"{datatype}_{array.ndim}", list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    names = [f"{datatype}_{array.ndim}" for datatype, array in tensors]
    parameters = {f"p{k}": v for k, v in parameters.items()}
    answer = _alike(
        servers, "echo", inputs, [*names, "SEEN"], parameters=parameters or None, request_id=request_id
    )
    assert answer[0] == "ok", answer


def test_the_repository_loads_on_triton(servers: dict[str, str], tmp_path: Path) -> None:
    """Both models READY on Triton (its config checks pass): the differential tests compare answers."""
    client = httpclient.InferenceServerClient(servers["triton"])
    assert client.is_model_ready("values") and client.is_model_ready("echo")
