"""Run Triton's own qa against tcli's `tritonserver` or the real one, and count the cases that pass:
the subtests of its python-backend qa (qa/L0_backend_python in a checkout of
triton-inference-server/server), and whole suites named as their folders (L0_lifecycle, ...).

Each subtest's test.sh runs as Triton's top-level test.sh runs it, `(cd SUBTEST && bash -ex test.sh)`,
with the environment that script exports (TRITON_DIR, SERVER, BACKEND_DIR, MODELDIR, DATADIR, ...).
`python_test` is the top-level test.sh's own client, python_test.py, run as test.sh runs it: its
header, the models it copies, run_server, pytest, kill_server (less its Python-version checks and
environment setup, and less its two CUDA cases: no GPU here). The qa files are never edited: they are
copied to $TRITON_DIR/qa in a scratch folder (init_args expects them there, as in Triton's image) and
these adaptations are made around them:
- `$TRITON_DIR/bin/tritonserver` is a small script that starts the chosen server with the qa's flags
  and `--exit-on-error=false --strict-readiness=false`, so a model that cannot load here fails
  alone: the qa's GPU models, and on real Triton those importing torch (its python stub's
  environment has none), where strict readiness kept the server from ever being ready for test.sh
  (not in lifecycle, which waits for a server whose model fails to exit, as by default);
- `pip`/`pip3` on PATH do nothing (the qa swaps torch builds: never in the project's venv), and
  `git clone .../python_backend` copies a local checkout of triton-inference-server/python_backend;
- `python3` and `pytest` are this interpreter's (pytest and torch come from the project's venv);
- the qa's tritonclient (2.51) finds its shared-memory library through `pkg_resources`, which
  current setuptools lacks: the clients get a one-function stand-in when it is missing;
- the qa's shared-memory leak probe is skipped, as the qa skips it on Jetson and Windows: it needs
  `triton_shm_monitor`, a module built with Triton's python backend, reading Triton's own regions.

A whole suite (`L0_lifecycle`, `L0_parameters`, ...) runs as Triton's CI runs it,
`(cd qa/L0_x && bash -ex test.sh)`, with no flag added: its scripts name
/opt/tritonserver/bin/tritonserver and /data/inferenceserver/24.10 outright, so suites need
`--isolate`, where the scratch TRITON_DIR and `--datadir` are mounted at those paths. Their clients
are mostly unittest scripts (`python lifecycle_test.py LifeCycleTest.test_x`); each unittest case
counts too (a sitecustomize on the clients' path records it, and ends a case still running after the
same time limit). ADAPT names what is changed around a suite, on both servers alike, where a case
needs what neither server has here; for all suites, Triton's C++ `identity` backend is a python-based
backend of the same name in $TRITON_DIR/backends (input i returned as output i, after the config's
`execute_delay_ms`). tcli's server allows client shared memory (`--allow-client-shm=true`), as 2.51
always did. Adapted suites: L0_request_cancellation (its C++ unit test binary, built against Triton's
core library, left out on both), L0_decoupled (its models laid out as Triton's QA image does, its
custom trial's C++ repeat and square backends python-based ones of the same names, and on the
reference, which lacks its pytorch backend, fan_repeat's TorchScript add/sub step served by a
python-based `pytorch` backend; tcli's built-in one wins over it, as Triton's library would),
L0_shared_memory (Triton's TF `simple` example as a python model) and L0_model_update (its tearDown's
`_feedErrorsToResult` and `_outcome.errors`, gone in Python 3.11, given back to its clients as the
case's errors and failures from its result). L0_python_api needs core's
python/test files beside it, as Triton's CI puts them there: `--core` names a checkout of triton-inference-server/core (`git archive r24.10 python/test`);
on tcli its clients' `tritonserver` and `tritonfrontend` are tcli.inprocess and tcli.frontend.

A case is a pytest test (every pytest run of the subtest, recorded by a small plugin; a test run twice
counts twice; a file that stops at its import is one failed case; one still waiting after $TRITON_QA_CASE_TIMEOUT seconds, 300 by default, fails: some
qa clients wait on their stream without a timeout) or a shell check: each call of a
`verify_*`/`check_*` function the subtest's test.sh defines (e.g. logging's `verify_log_counts 4 3`),
failed when it prints "Test Failed"; in examples, which runs client scripts, each example's run,
failed when test.sh prints "Failed to verify" for it; in a suite that loops over folders of configs
(L0_model_config), each iteration that echoes `Test <folder>`, failed when test.sh then echoes
"*** FAILED" (or "... Test Failed") before the next.

ADAPT, per suite: L0_model_config copies TensorRT plans, TensorFlow savedmodels and graphdefs,
OpenVINO models and a C++ backend (libtriton_repeat.so) that neither server has here into its config
folders; a copy whose source is absent is skipped (said on stderr) instead of ending test.sh, and the
cases that need those files fail on both servers. Its decoupled ensembles' `repeat` backend is a
python-based backend of the same name in $TRITON_DIR/backends, as identity is.

    python benchmarks/triton_qa.py --checkout /tmp/triton-2.51 --python-backend /tmp/pb-r24.10 \\
        --server tcli --server triton argument_validation logging

The qa's clients use the tritonclient of the qa's version (`--client-wheel`, by default the wheel
next to the reference server): newer ones refuse what the qa sends. The qa's servers listen on the
fixed ports 8000-8002, so one subtest runs at a time; `--isolate` runs the whole script in network and
mount namespaces of its own, where no other server holds them and /dev/shm is 1 GiB, as in Triton's
CI (test_growth_error relies on that); `--isolate` also gives it a pid namespace, as suites refuse
to start while `ps` shows another tritonserver. Checkouts:
`git archive v2.51.0 qa/L0_backend_python qa/python_models qa/common` of the server repository (a
whole suite reads other folders of qa too: L0_lifecycle its qa/custom_models) and
`git archive r24.10` of python_backend. bls and ensemble copy models from the qa's DATADIR (its
`--datadir`), which Triton's qa/common scripts make (torch and onnx are in the project's venv):

    cd CHECKOUT/qa/common && python gen_qa_models.py --libtorch --onnx --models_dir DATA/qa_model_repository
    python gen_qa_implicit_models.py --onnx --models_dir DATA/qa_sequence_implicit_model_repository
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TCLI_LAUNCHER = Path(sys.executable).parent / "tritonserver"
REFERENCE = Path(os.environ.get("TRITON_REFERENCE_DIR") or Path.home() / ".cache" / "triton-reference")
# the subtests Triton's test.sh runs on Linux, less `env` (it downloads miniconda) and `restart`;
# python_test is test.sh's own client, run before them
PYTHON_TEST = "python_test"
SUBTESTS = [
    PYTHON_TEST,
    "ensemble",
    "bls",
    "decoupled",
    "response_sender",
    "variants",
    "io",
    "python_based_backends",
    "async_execute",
    "lifecycle",
    "argument_validation",
    "logging",
    "custom_metrics",
    "model_control",
    "examples",
    "request_rescheduling",
]

# records each pytest test's outcome, one JSON line per test, to $TRITON_QA_RESULTS
_PLUGIN = """
import json, os, signal, sys

import pytest

_outcomes = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    # a client that waits without a timeout (queue.get()) gives up here, failing its case
    limit = int(os.environ.get("TRITON_QA_CASE_TIMEOUT", "300"))

    def expire(signum, frame):
        raise TimeoutError(f"triton_qa: no answer within {limit} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

def pytest_configure(config):
    # the shm-leak probe, skipped as on Jetson and Windows: it needs triton_shm_monitor, a module
    # built with Triton's python backend that reads Triton's own region names
    sys.path.append(os.environ["TRITON_QA_COMMON"])
    import shm_util
    shm_util._skip_shm_leak_probe = True

def pytest_collectreport(report):
    # a file that stops at its import is a failed case, not none
    if report.failed:
        _outcomes[report.nodeid or "collection"] = "failed"

def pytest_runtest_logreport(report):
    outcome = _outcomes.get(report.nodeid)
    if report.failed:
        outcome = "failed"
    elif report.skipped and outcome is None:
        outcome = "skipped"
    elif report.passed and report.when == "call" and outcome is None:
        outcome = "passed"
    _outcomes[report.nodeid] = outcome

def pytest_sessionfinish(session):
    xml = getattr(session.config.option, "xmlpath", None) or ""
    with open(os.environ["TRITON_QA_RESULTS"], "a") as f:
        for nodeid, outcome in _outcomes.items():
            f.write(json.dumps({"run": os.path.basename(xml), "case": nodeid,
                                "outcome": outcome or "failed"}) + "\\n")
"""

# the same for unittest cases run outside pytest (`python X_test.py Case.test_y`): a case's outcome is
# appended as it is known; a case that fails after passing (a subtest) counts as failed
_SITECUSTOMIZE = """
import json, os, signal, sys, unittest

_results = os.environ.get("TRITON_QA_RESULTS")


def _record(test, outcome):
    if not _results or "pytest" in sys.modules:  # pytest's runs are the plugin's to record
        return
    case = test.id() if hasattr(test, "id") else str(test)
    with open(_results, "a") as f:
        f.write(json.dumps({"run": os.path.basename(sys.argv[0]), "pid": os.getpid(),
                            "case": case, "outcome": outcome}) + "\\n")


_Result = unittest.result.TestResult
for _name, _outcome in (("addSuccess", "passed"), ("addFailure", "failed"), ("addError", "failed"),
                        ("addSkip", "skipped"), ("addUnexpectedSuccess", "failed"),
                        ("addExpectedFailure", "passed")):
    def _wrap(original, outcome):
        def hook(self, test, *args):
            _record(test, outcome)
            return original(self, test, *args)
        return hook
    setattr(_Result, _name, _wrap(getattr(_Result, _name), _outcome))

_add_subtest = _Result.addSubTest


def _subtest(self, test, subtest, err):
    if err is not None:
        _record(test, "failed")
    return _add_subtest(self, test, subtest, err)


_Result.addSubTest = _subtest
_run = unittest.TestCase.run


def _timed_run(self, result=None):
    if "pytest" in sys.modules:
        return _run(self, result)
    limit = int(os.environ.get("TRITON_QA_CASE_TIMEOUT", "300"))

    def expire(signum, frame):
        raise TimeoutError(f"triton_qa: no answer within {limit} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit)
    try:
        return _run(self, result)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


unittest.TestCase.run = _timed_run
"""

# the qa's tritonclient (2.51) finds its shared-memory library with pkg_resources, which current
# setuptools no longer has: the one function it calls, for the clients
_PKG_RESOURCES = """
import importlib.resources


def resource_filename(package, resource):
    return str(importlib.resources.files(package) / resource)
"""

_PIP = """#!/bin/sh
echo "triton_qa: skipped: pip $*" >&2
"""

_GIT = """#!/bin/bash
# `git clone <org>/python_backend -b TAG` copies the local checkout; anything else is real git
if [ "$1" = clone ] && [[ "$2" == */python_backend ]]; then
    cp -r "$TRITON_QA_PYTHON_BACKEND" python_backend
    exit $?
fi
exec /usr/bin/git "$@"
"""


EXTRA_FLAGS = "--exit-on-error=false --strict-readiness=false"  # after the qa's own flags
# subtests whose servers start with the qa's flags alone: lifecycle waits for a server whose model
# fails to initialize to exit, as Triton's default --exit-on-error makes it
TRITON_DEFAULTS = {"lifecycle"}
TRITON_251_INPUT_LIMIT = 2**40  # tritonserver 2.51 has no --http-max-input-size: no limit
QA_PORTS = (8000, 8001, 8002)  # the qa's clients and test.sh use these, fixed
SUBTEST_TIMEOUT = 3600.0
SUITE_TIMEOUT = 3 * 3600.0
INSTALL_DIR = Path("/opt/tritonserver")  # where the suites' scripts look for the server
QA_DATADIR = Path("/data/inferenceserver/24.10")  # ... and for the generated models


def is_suite(name: str) -> bool:
    """A whole qa suite (its folder's name), not a subtest of L0_backend_python."""
    return name.startswith("L0_")


# Triton's C++ `identity` backend (many suites' dummy model), as a python-based backend both servers
# load from $BACKEND_DIR/identity/model.py: input i is output i, in config order, after the
# config's `execute_delay_ms`; a request cancelled before then is answered CANCELLED; an instance
# takes the config's `creation_delay_sec` to load
_IDENTITY_BACKEND = """
import json, time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in config.get("input", [])]
        self.outputs = [o["name"] for o in config.get("output", [])]
        parameters = config.get("parameters", {})
        delay = parameters.get("execute_delay_ms", {}).get("string_value", "0")
        self.delay = int(delay) / 1000.0
        time.sleep(int(parameters.get("creation_delay_sec", {}).get("string_value", "0")))

    def execute(self, requests):
        if self.delay:
            deadline = time.monotonic() + self.delay
            while time.monotonic() < deadline and not all(r.is_cancelled() for r in requests):
                time.sleep(0.01)
        responses = []
        for request in requests:
            if request.is_cancelled():
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("request cancelled", pb_utils.TritonError.CANCELLED)))
                continue
            tensors = []
            for name_in, name_out in zip(self.inputs, self.outputs):
                tensor = pb_utils.get_input_tensor_by_name(request, name_in)
                if tensor is not None:
                    tensors.append(pb_utils.Tensor(name_out, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
"""

# L0_lifecycle's blocks (one server start each, between `LOG_IDX=$((LOG_IDX+1))` lines) that copy a
# TensorFlow (graphdef, savedmodel) or TensorRT (plan) model, or a repository gen_qa_models.py makes
# only with them (qa_ensemble_model_repository, qa_sequence_model_repository), or serve a model of
# Triton's C++ `sequence` backend (custom_sequence_int32): neither server has those here, and
# test.sh stops at the first `cp` of a model that is not there, or a server that cannot start
_LIFECYCLE_UNAVAILABLE = re.compile(
    r"graphdef|savedmodel|plan|qa_ensemble_model_repository|qa_sequence_model_repository|custom_sequence_int32"
)
_LIFECYCLE_BLOCK = "LOG_IDX=$((LOG_IDX+1))\n"


# on real Triton only: the block whose server starts with an onnx model loaded (test_file_override),
# which the reference here cannot load (no onnxruntime backend), so test.sh would stop there; its
# cases count for tcli alone
_LIFECYCLE_ONNX_AT_START = "# LifeCycleTest.test_file_override\n"


# test_shutdown_dynamic/_ensemble queue 6 executions of 5 s behind a 30 s exit timeout: the C++
# identity just makes it; the python-based one's instance takes about a second more to unload, and
# the server then exits 1 ("Exit timeout expired"), which stops test.sh. 4 s each keeps requests
# queued past the signal, as the cases need.
# `kill $SERVER_PID; wait $SERVER_PID` under `set -e` ends test.sh when the server already ended on
# its own (Triton 2.51 dies in the load/unload stress case) or exits non-zero: each block counts on
# its own instead
_LIFECYCLE_KILL = re.compile(r"^(\s*)kill \$SERVER_PID\n\1wait \$SERVER_PID$", re.M)
_LIFECYCLE_DELAY = ('string_value: \\"5000\\"', 'string_value: \\"4000\\"')


def _lifecycle_without_tf_trt(qa_suite: Path, server: str) -> None:
    """L0_lifecycle less its blocks that need TensorFlow or TensorRT models (both servers alike), the
    shutdown cases' executions a second shorter, a server's end not ending test.sh."""
    script = qa_suite / "test.sh"
    text = script.read_text()
    end = text.index("if [ $RET -eq 0 ]; then")
    blocks = text[:end].split(_LIFECYCLE_BLOCK)
    # the first block holds the script's header; a block that makes no models of its own serves the
    # previous block's, and goes with it
    kept: list[str] = []
    dropped = False
    for block in blocks:
        if "mkdir" in block or not dropped:
            dropped = _LIFECYCLE_UNAVAILABLE.search(block) is not None
        if not dropped and not (server == "triton" and _LIFECYCLE_ONNX_AT_START in block):
            kept.append(block)
    text = (_LIFECYCLE_BLOCK.join(kept) + text[end:]).replace(*_LIFECYCLE_DELAY)
    script.write_text(_LIFECYCLE_KILL.sub(r"\1kill $SERVER_PID || true\n\1wait $SERVER_PID || true", text))


# L0_model_config copies TensorRT plans, TF savedmodels, OpenVINO models and a C++ backend
# (libtriton_repeat.so) that neither server has here into its config folders: a copy whose source is
# absent is skipped (said on stderr), so the script goes on and those cases fail on both servers
_SKIP_ABSENT_COPIES = """
cp() {  # triton_qa: a source absent here is skipped, not fatal
    local arg
    for arg in "${@:1:$#-1}"; do
        if [[ "$arg" != -* && ! -e "$arg" ]]; then
            echo "triton_qa: absent here, not copied: $arg" >&2
            return 0
        fi
    done
    command cp "$@"
}
"""


# Triton's C++ `repeat` and `square` backends as python-based backends both servers load from
# $BACKEND_DIR/<name>/model.py, for L0_model_config's ensembles that check decoupled branching and
# L0_decoupled's custom trial. repeat: one response per element of IN (OUT the element, IDX its
# index), the i-th after DELAY[i] ms, then the final flag, on a thread of its own, while execute
# returns after WAIT ms (so one instance serves several requests at once); IN and DELAY must have
# the same shape. Like the C++ backend (and unlike python_backend's example) it serves a model
# whose decoupled policy is off too, sending its one response and the final flag apart.
# square: IN's value n answered n times with n.
_REPEAT_BACKEND = """
import threading, time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY")
            delays = delay.as_numpy() if delay is not None else np.zeros(values.shape, np.uint32)
            if values.shape != delays.shape:
                raise pb_utils.TritonModelException(
                    f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}.")
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, values, delays), daemon=True).start()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT")
            if wait is not None:
                time.sleep(int(wait.as_numpy()[0]) / 1000.0)
        return None

    def respond(self, sender, values, delays):
        for index, value in enumerate(values):
            time.sleep(int(delays[index]) / 1000.0)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([value], np.int32)),
                pb_utils.Tensor("IDX", np.array([index], np.uint32)),
            ]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""
_SQUARE_BACKEND = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=self.respond, args=(request.get_response_sender(), n), daemon=True).start()
        return None

    def respond(self, sender, n):
        for _ in range(n):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([n], np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def _model_config_adaptations(qa_suite: Path, server: str) -> None:
    test_sh = qa_suite / "test.sh"
    anchor = "source ../common/util.sh\n"
    test_sh.write_text(test_sh.read_text().replace(anchor, anchor + _SKIP_ABSENT_COPIES, 1))
    repeat = qa_suite.parents[1] / "backends" / "repeat"  # $TRITON_DIR/backends, as identity's
    repeat.mkdir(parents=True, exist_ok=True)
    (repeat / "model.py").write_text(_REPEAT_BACKEND)


def _no_cancellation_unit_test(suite: Path, server: str) -> None:
    """L0_request_cancellation's first block runs request_cancellation_test, a C++ unit test binary
    built against Triton's core library (libtritonserver.so), which neither server has here: it is
    left out on both, a stand-in saying so (its gRPC, scheduler and implicit-state blocks still run)."""
    stand_in = suite / "request_cancellation_test"
    stand_in.write_text(
        "#!/bin/sh\necho 'triton_qa: left out: request_cancellation_test, a C++ unit test of Triton core'\n"
    )
    stand_in.chmod(0o755)


# the reference's pytorch backend, absent here (tcli's built-in one wins over it, as Triton's library
# would): the qa's add/sub TorchScript models (gen_qa_models.py) as a python-based backend, in numpy
# (the reference's python stub has no torch): OUTPUT__0 = INPUT0 + INPUT1 and OUTPUT__1 = INPUT0 -
# INPUT1, swapped in versions 2 and 3, as gen_qa_models makes them
_ADDSUB_PYTORCH_BACKEND = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(o["data_type"]) for o in config["output"][:2]]
        self.swap = args["model_version"] in ("2", "3")

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            results = (a - b, a + b) if self.swap else (a + b, a - b)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor(f"OUTPUT__{i}", r.astype(t)) for i, (r, t) in enumerate(zip(results, self.dtypes))
            ]))
        return responses
"""


def _decoupled_python_models(suite: Path, server: str) -> None:
    """L0_decoupled's models as Triton's QA image lays them out (Dockerfile.QA): each model's version
    folder 1; `models`, the custom trial's repository, with repeat_int32 and square_int32 of Triton's
    C++ repeat and square backends (src/test/models: python_backend's example configs with
    `backend: "repeat"`/`"square"` and no instance group), which the python-based stand-ins serve
    here (see _REPEAT_BACKEND); python_models, the python trial's, `models` with python_backend's
    decoupled examples as repeat_int32 and square_int32. The reference's pytorch backend, which
    fan_repeat's last step needs, is a python-based stand-in (_ADDSUB_PYTORCH_BACKEND)."""
    examples = Path(os.environ["TRITON_QA_PYTHON_BACKEND"]) / "examples" / "decoupled"
    for model in (suite / "models").iterdir():  # the image makes each model's version folder
        (model / "1").mkdir(exist_ok=True)
    shutil.copytree(suite / "models", suite / "python_models")
    backends = suite.parents[1] / "backends"  # $TRITON_DIR/backends, as identity's
    for model, text in (("repeat", _REPEAT_BACKEND), ("square", _SQUARE_BACKEND)):
        folder = suite / "python_models" / f"{model}_int32"
        (folder / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(examples / f"{model}_model.py", folder / "1" / "model.py")
        config = (examples / f"{model}_config.pbtxt").read_text()
        shutil.copy(examples / f"{model}_config.pbtxt", folder / "config.pbtxt")
        folder = suite / "models" / f"{model}_int32"
        (folder / "1").mkdir(parents=True, exist_ok=True)
        config = config.replace('backend: "python"', f'backend: "{model}"')
        (folder / "config.pbtxt").write_text(config.replace("instance_group [{ kind: KIND_CPU }]", ""))
        (backends / model).mkdir(parents=True, exist_ok=True)
        (backends / model / "model.py").write_text(text)
    (backends / "pytorch").mkdir(parents=True, exist_ok=True)
    (backends / "pytorch" / "model.py").write_text(_ADDSUB_PYTORCH_BACKEND)


# Triton's TF `simple` example (docs/examples/model_repository/simple: INT32 [16] sum and difference,
# max_batch_size 8), which neither server loads here, as a python model
_SIMPLE_CONFIG = """
name: "simple"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
_SIMPLE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""


def _shared_memory_simple(suite: Path, server: str) -> None:
    """L0_shared_memory's `models/simple`, which Triton's QA image copies from its TF example: the
    same model in python (see _SIMPLE_MODEL)."""
    folder = suite / "models" / "simple"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(_SIMPLE_CONFIG)
    (folder / "1" / "model.py").write_text(_SIMPLE_MODEL)


def _python_api(suite: Path, server: str) -> None:
    """L0_python_api: core's python/test files (test_api.py, test_binding.py, test_api_models) beside
    the qa's, as Triton's CI copies them there, from the core checkout `--core` names; on tcli, the
    `tritonserver` and `tritonfrontend` its clients import are tcli.inprocess and tcli.frontend of
    this checkout (the server runs in the client; real Triton's are wheels the reference lacks)."""
    core = os.environ.get("TRITON_QA_CORE")
    if core:
        shutil.copytree(Path(core) / "python" / "test", suite, dirs_exist_ok=True)
    if server == "tcli":
        for name, module in (("tritonserver", "tcli.inprocess"), ("tritonfrontend", "tcli.frontend")):
            (suite / f"{name}.py").write_text(
                f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom {module} import *  # noqa: F403\n"
            )


# unittest's TestCase._feedErrorsToResult and _Outcome.errors, which L0_model_update's tearDown
# reads to learn whether its case failed (then unloads the model and waits for the next case), are
# gone in Python 3.11 (Triton's CI clients run 3.10): on 3.11 and later, the case's errors and
# failures are the ones its result already holds
_FEED_ERRORS = """

if sys.version_info >= (3, 11) and not hasattr(unittest.TestCase, "_feedErrorsToResult"):
    def _outcome_errors(outcome):
        return [(test, err) for test, err in outcome.result.errors + outcome.result.failures]

    def _feed_errors_to_result(self, result, errors):
        result.errors.extend((test, err) for test, err in errors if test is self)

    unittest.case._Outcome.errors = property(_outcome_errors)
    unittest.TestCase._feedErrorsToResult = _feed_errors_to_result
"""


def _unittest_feed_errors(suite: Path, server: str) -> None:
    """L0_model_update's tearDown calls `self._feedErrorsToResult(result, self._outcome.errors)`,
    which Python 3.11 removed (Triton's CI clients run 3.10): every case would error there, and its
    clean-up after a failed case (unload, wait) would never run. The clients' sitecustomize gives
    them both back on 3.11+, answering from the case's result."""
    plugin = suite.parents[2] / "plugin" / "sitecustomize.py"  # SCRATCH/triton/qa/SUITE
    plugin.write_text(plugin.read_text() + _FEED_ERRORS)


# what is changed around a suite, where a case needs what neither server has here (a C++ backend, a
# GPU, a TensorFlow or TensorRT model) or what the qa's image adds: suite -> function(qa folder, server)
ADAPT: dict[str, Callable[[Path, str], None]] = {
    "L0_lifecycle": _lifecycle_without_tf_trt,
    "L0_python_api": _python_api,
    "L0_model_config": _model_config_adaptations,
    "L0_request_cancellation": _no_cancellation_unit_test,
    "L0_decoupled": _decoupled_python_models,
    "L0_shared_memory": _shared_memory_simple,
    "L0_model_update": _unittest_feed_errors,
}
GPU_CASES = ("test_gpu_tensor_error", "test_dlpack_tensor_error")  # python_test's CUDA cases


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _wait_for_ports(timeout: float = 600.0) -> None:
    """Until 8000-8002 are free (another server on this machine may hold them for a while)."""
    deadline = time.monotonic() + timeout
    while busy := [port for port in QA_PORTS if not _free(port)]:
        if time.monotonic() > deadline:
            raise SystemExit(f"triton_qa: port(s) {busy} still in use: the qa's servers need 8000-8002")
        time.sleep(1.0)  # polling interval


@dataclass
class Outcome:
    subtest: str
    server: str
    cases: list[tuple[str, str]] = field(default_factory=list)  # (case, passed/failed/skipped)
    exit_code: int = 0
    port_clash: bool = False  # a server of the run found a qa port taken: rerun the subtest

    @property
    def passed(self) -> int:
        return sum(1 for _, outcome in self.cases if outcome == "passed")

    @property
    def total(self) -> int:
        return sum(1 for _, outcome in self.cases if outcome != "skipped")


def _server_script(server: str, tcli_path: Path, subtest: str) -> str:
    flags = "" if subtest in TRITON_DEFAULTS or is_suite(subtest) else f" {EXTRA_FLAGS}"
    if server == "triton":
        target = REFERENCE / "bin" / "tritonserver"
        # a suite's backends (the python-based identity) are in its TRITON_DIR, as in Triton's image;
        # the qa's own --backend-directory, later, still wins
        backends = f" --backend-directory={INSTALL_DIR / 'backends'}" if is_suite(subtest) else ""
        return f'#!/bin/bash\nexec "{target}"{backends} "$@"{flags}\n'
    # tcli takes current Triton's 64 MiB request limit; 2.51, whose qa this is, had none (its
    # growth_error and bls_memory send 1 GiB and 512 MiB to see the shared memory refuse them)
    unlimited = f" --http-max-input-size={TRITON_251_INPUT_LIMIT}"
    # and 2.51's client shared memory, always on (tcli, as later Triton, asks --allow-client-shm)
    unlimited += " --allow-client-shm=true"
    return f'#!/bin/bash\nexport PYTHONPATH="{tcli_path}"\nexec "{TCLI_LAUNCHER}" "$@"{flags}{unlimited}\n'


def _layout(scratch: Path, checkout: Path, server: str, tcli_path: Path, subtest: str) -> tuple[Path, Path]:
    """The qa copied into `scratch`, the fake TRITON_DIR and the PATH shims; returns (qa, triton_dir)."""
    triton_dir = scratch / "triton"
    # under TRITON_DIR as in Triton's CI image (/opt/tritonserver/qa): init_args expects its
    # repository at $TRITON_DIR/qa/L0_backend_python/models
    qa = triton_dir / "qa"
    # a suite may reach into any other folder of the qa (../L0_x, ../python_models): all of it
    parts = [path.name for path in (checkout / "qa").iterdir() if path.is_dir()] if is_suite(subtest) else []
    for part in parts or ("L0_backend_python", "python_models", "common"):
        shutil.copytree(checkout / "qa" / part, qa / part, symlinks=True)
    (triton_dir / "bin").mkdir(parents=True)
    launcher = triton_dir / "bin" / "tritonserver"
    launcher.write_text(_server_script(server, tcli_path, subtest))
    launcher.chmod(0o755)
    (triton_dir / "backends").mkdir()
    if server == "triton":
        # test.sh's own header sets BACKEND_DIR=$TRITON_DIR/backends
        (triton_dir / "backends" / "python").symlink_to(REFERENCE / "backends" / "python")
    else:
        (triton_dir / "backends" / "python").mkdir()
    shims = scratch / "shims"
    shims.mkdir()
    for name, text in (("pip", _PIP), ("pip3", _PIP), ("git", _GIT)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    for name in ("python", "python3"):
        (shims / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (shims / name).chmod(0o755)
    # bls runs a bare `pytest`: this interpreter's, not whichever is first on PATH
    (shims / "pytest").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pytest "$@"\n')
    (shims / "pytest").chmod(0o755)
    (scratch / "plugin").mkdir()
    (scratch / "plugin" / "_triton_qa_record.py").write_text(_PLUGIN)
    (scratch / "plugin" / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    with contextlib.suppress(ImportError):
        import pkg_resources  # noqa: F401 - setuptools still has it: the clients use the real one
    if "pkg_resources" not in sys.modules:
        (scratch / "plugin" / "pkg_resources.py").write_text(_PKG_RESOURCES)
    if is_suite(subtest):
        (triton_dir / "backends" / "identity").mkdir()
        (triton_dir / "backends" / "identity" / "model.py").write_text(_IDENTITY_BACKEND)
    if subtest in ADAPT:
        ADAPT[subtest](qa / subtest, server)
    return qa, triton_dir


@contextlib.contextmanager
def _mounted(source: Path, target: Path):
    """`source` seen at `target` for the run (a bind mount in this private mount namespace)."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _checks(trace: str, test_sh: str) -> list[tuple[str, str]]:
    """The shell checks in an xtrace made with PS4='+${FUNCNAME[0]:-main}: ': each top-level call of
    a verify_*/check_* function of `test_sh`, failed when its body echoed "Test Failed"."""
    names = set(re.findall(r"^\s*(?:function\s+)?((?:verify|check)_\w+)\s*\(\)", test_sh, re.M))
    checks: list[list[str]] = []
    current: list[str] | None = None
    for line in trace.splitlines():
        match = re.match(r"^\++(\w+): (.*)$", line)
        if match is None:
            continue
        func, command = match.groups()
        if func == "main":
            current = None
            word = command.split(" ", 1)[0]
            if word in names:
                current = [command, "passed"]
                checks.append(current)
        elif current is not None and func in names and "Test Failed" in command:
            current[1] = "failed"
    seen: dict[str, int] = {}
    named = []
    for command, outcome in checks:
        seen[command] = seen.get(command, 0) + 1
        suffix = f"#{seen[command]}" if seen[command] > 1 else ""
        named.append((f"{command}{suffix}", outcome))
    return named


def _example_runs(trace: str) -> list[tuple[str, str]]:
    """The examples subtest's client runs in its xtrace: each `CLIENT_LOG=../examples_NAME...` starts
    one (its client script, no pytest), failed when test.sh then echoes "Failed to ..." before the next."""
    runs: list[list[str]] = []
    for line in trace.splitlines():
        if (
            match := re.match(r"^\++main: CLIENT_LOG=\S*/(examples_\w+?)(?:_client)?\.log$", line)
        ) is not None:
            runs.append([match.group(1), "passed"])
        elif runs and line.startswith(("+main: echo", "++main: echo")) and "Failed to" in line:
            runs[-1][1] = "failed"
    return [(name, outcome) for name, outcome in runs]


def _loop_cases(trace: str) -> list[tuple[str, str]]:
    """The cases of a suite that loops over folders (L0_model_config): each top-level `echo "Test X"`
    starts case X, failed when test.sh then echoes a "*** ...FAILED/Failed" line before the next case
    (its closing verdict, "*** Test FAILED", ends the last case)."""
    cases: list[list[str]] = []
    current: list[str] | None = None
    for line in trace.splitlines():
        match = re.match(r"^\++main: echo (?:-e )?'?(.*?)'?$", line)
        if match is None:
            continue
        text = match.group(1)
        if re.match(r"Test (?!Duration|Passed|Failed|FAILED)\S", text):
            current = [text.removeprefix("Test "), "passed"]
            cases.append(current)
        elif re.search(r"\*\*\* Test (?:Passed|Failed|FAILED)\b", text):
            current = None
        elif current is not None and re.search(r"\*\*\* .*(?:FAILED|Failed)", text):
            current[1] = "failed"
    return [(name, outcome) for name, outcome in cases]


def _python_test_script(test_sh: str) -> str:
    """test.sh's own python_test run: its header (variables, util.sh, common.sh), the models it
    copies, then run_server, pytest python_test.py and kill_server, as test.sh has them. Left out:
    its Python-version checks and setup_python_enviroment.sh (the interpreter is the project's
    venv's), and what follows kill_server (shm page counts, non-graceful exit, more servers)."""
    lines = test_sh.splitlines()
    header_end = lines.index("rm -fr *.log ./models") + 1
    models = lines.index("mkdir -p models/identity_fp32/1/")
    client = next(i for i, line in enumerate(lines) if "$CLIENT_PY" in line and "pytest" in line)
    end = lines.index("kill_server", client) + 1
    return "\n".join(lines[:header_end] + lines[models:end]) + "\n"


def run_subtest(
    subtest: str,
    server: str,
    checkout: Path,
    python_backend: Path,
    tcli_path: Path,
    keep: Path | None,
    client_dir: Path | None = None,
    datadir: Path | None = None,
) -> Outcome:
    _wait_for_ports()
    scratch = Path(tempfile.mkdtemp(prefix=f"triton_qa_{subtest}_{server}_"))
    os.environ["TRITON_QA_PYTHON_BACKEND"] = str(python_backend)  # for ADAPT too
    try:
        qa, triton_dir = _layout(scratch, checkout, server, tcli_path, subtest)
        home = qa / "L0_backend_python"
        results = scratch / "results.jsonl"
        workdir = qa / subtest if is_suite(subtest) else home / subtest
        script_path = workdir / "test.sh"
        if subtest == PYTHON_TEST:
            workdir = home
            script_path = home / "triton_qa_python_test.sh"
            script_path.write_text(_python_test_script((home / "test.sh").read_text()))
        env = dict(os.environ)
        env.update(
            PATH=f"{scratch / 'shims'}:{env.get('PATH', '')}",
            PYTHONPATH=os.pathsep.join(str(path) for path in (scratch / "plugin", client_dir) if path),
            PYTEST_PLUGINS="_triton_qa_record",
            TRITON_QA_RESULTS=str(results),
            TRITON_QA_COMMON=str(qa / "common"),
            TRITON_QA_PYTHON_BACKEND=str(python_backend),
            NVIDIA_TRITON_SERVER_VERSION="24.10",
            TRITON_SERVER_VERSION="2.51.0",  # as Triton's image sets it (lifecycle compares it)
            REPO_VERSION="24.10",
            PYTHON_BACKEND_REPO_TAG="r24.10",
            DATADIR=str(datadir or scratch / "data"),
            TRITON_DIR=str(triton_dir),
            SERVER=str(triton_dir / "bin" / "tritonserver"),
            BACKEND_DIR=str(REFERENCE / "backends" if server == "triton" else triton_dir / "backends"),
            MODELDIR=str(home),
            TEST_JETSON="0",
            TEST_WINDOWS="0",
            CUDA_VISIBLE_DEVICES="0",
            PYTHON_ENV_VERSION="11",
        )
        if subtest == PYTHON_TEST:
            # no GPU here: its two CUDA cases are left out, as test.sh leaves them out on Jetson
            env["PYTEST_ADDOPTS"] = " ".join(
                f"--deselect={PYTHON_TEST}.py::PythonTest::{case}" for case in GPU_CASES
            )
        env.pop("VIRTUAL_ENV", None)
        # as Triton's test.sh: `(cd SUBTEST && bash -ex test.sh)`, with a PS4 naming the function
        script = f"PS4='+${{FUNCNAME[0]:-main}}: '; set -ex; source ./{script_path.name}"
        trace_path = scratch / "trace.log"
        with contextlib.ExitStack() as mounts, trace_path.open("w") as trace:
            if is_suite(subtest):
                if os.environ.get("TRITON_QA_ISOLATED") != "1":
                    raise SystemExit(f"triton_qa: {subtest} names /opt/tritonserver: run it with --isolate")
                mounts.enter_context(_mounted(triton_dir, INSTALL_DIR))
                if datadir is not None:
                    mounts.enter_context(_mounted(datadir, QA_DATADIR))
            # a session of its own: whatever test.sh leaves running (a server) ends with it
            proc = subprocess.Popen(
                ["bash", "-c", script],
                cwd=workdir,
                env=env,
                stdout=trace,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                exit_code = proc.wait(timeout=SUITE_TIMEOUT if is_suite(subtest) else SUBTEST_TIMEOUT)
            except subprocess.TimeoutExpired:
                exit_code = -int(signal.SIGKILL)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        outcome = Outcome(subtest, server, exit_code=exit_code)
        logs = (path.read_text(errors="replace") for path in workdir.rglob("*.log"))
        outcome.port_clash = any("already in use" in text for text in logs)
        if results.exists():
            outcome.cases += _recorded(results.read_text())
        trace_text = trace_path.read_text(errors="replace")
        outcome.cases += _checks(trace_text, script_path.read_text())
        outcome.cases += _example_runs(trace_text)
        outcome.cases += _loop_cases(trace_text)
        return outcome
    finally:
        if keep is not None:
            target = keep / f"{subtest}.{server}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(scratch, target, symlinks=True, ignore=shutil.ignore_patterns("python_backend"))
        shutil.rmtree(scratch, ignore_errors=True)


def _recorded(text: str) -> list[tuple[str, str]]:
    """The cases the pytest plugin and the unittest hook recorded, in order; a case recorded more
    than once in one run (a unittest subtest failing, then its test) fails if any record failed;
    the n-th process running the same unittest script is run "#n"."""
    cases: dict[str, str] = {}
    processes: dict[str, list[int]] = {}  # a script run again (test.sh's loops) counts again
    for line in text.splitlines():
        record = json.loads(line)
        case = record["case"].split("::", 1)[-1]
        run = record["run"]
        if "pid" in record:
            seen = processes.setdefault(run, [])
            if record["pid"] not in seen:
                seen.append(record["pid"])
            if (index := seen.index(record["pid"])) > 0:
                run = f"{run}#{index + 1}"
        label = f"{run}:{case}" if run else case
        if cases.get(label) != "failed":
            cases[label] = record["outcome"]
    return list(cases.items())


def _reexec_isolated() -> None:
    """This script again, in network, mount and pid namespaces of its own (needs root): the loopback
    up, no other server on 8000-8002 nor in `ps`, and a /dev/shm of 1 GiB as in Triton's CI (growth_error counts on
    it; shm page counts see only the qa's regions)."""
    argv = [arg for arg in sys.argv[1:] if arg != "--isolate"]
    command = (
        'ip link set lo up && mount -t tmpfs -o size=1g tmpfs /dev/shm && TRITON_QA_ISOLATED=1 exec "$0" "$@"'
    )
    # a pid namespace too: suites refuse to start while `ps` shows any tritonserver (another
    # developer's on this machine)
    unshare = ["unshare", "--net", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc"]
    os.execvp(
        "unshare", [*unshare, "sh", "-c", command, sys.executable, str(Path(__file__).resolve()), *argv]
    )


def _install_client(wheel: Path, target: Path) -> None:
    """The qa's own tritonclient (its version's wheel) into `target`, ahead of the venv's on the
    clients' PYTHONPATH: newer clients refuse what the qa sends (BF16 from np.float32)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
    )


def _run_all(
    args: argparse.Namespace, servers: list[str], client_dir: Path | None
) -> list[tuple[str, dict[str, Outcome]]]:
    """Each subtest on each server in turn, printing each outcome as it comes."""
    table: list[tuple[str, dict[str, Outcome]]] = []
    for subtest in args.subtests or SUBTESTS:
        row: dict[str, Outcome] = {}
        for server in servers:
            outcome = run_subtest(
                subtest,
                server,
                args.checkout.resolve(),
                args.python_backend.resolve(),
                args.tcli_path,
                args.keep,
                client_dir,
                args.datadir.resolve() if args.datadir else None,
            )
            row[server] = outcome
            clash = " PORT CLASH: a qa port was taken by another server; rerun" if outcome.port_clash else ""
            print(
                f"{subtest} [{server}]: {outcome.passed}/{outcome.total} (test.sh exit {outcome.exit_code}){clash}",
                flush=True,
            )
            for case, result in outcome.cases:
                if args.verbose or result == "failed":
                    print(f"    {result:7} {case}", flush=True)
        table.append((subtest, row))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subtests", nargs="*", help=f"default: {' '.join(SUBTESTS)}")
    parser.add_argument("--checkout", type=Path, required=True, help="holds qa/L0_backend_python")
    parser.add_argument("--python-backend", type=Path, required=True, help="a python_backend checkout")
    parser.add_argument(
        "--server", action="append", choices=["tcli", "triton"], help="tcli (default), triton, or both"
    )
    parser.add_argument("--tcli-path", type=Path, default=ROOT, help="PYTHONPATH of tcli's server")
    parser.add_argument("--keep", type=Path, help="copy each run's scratch folder (logs) here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case")
    parser.add_argument("--datadir", type=Path, help="the qa's DATADIR (qa_model_repository, ...): see above")
    parser.add_argument(
        "--core", type=Path, help="a triton-inference-server/core checkout (L0_python_api's test_api.py)"
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run in network and mount namespaces of its own (root): free ports, a 1 GiB /dev/shm",
    )
    parser.add_argument(
        "--client-wheel",
        type=Path,
        default=next(iter(sorted((REFERENCE / "wheels").glob("tritonclient-*.whl"))), None),
        help="the tritonclient wheel the qa's clients use (default: the reference's; else the venv's)",
    )
    args = parser.parse_args()
    if args.core is not None:
        os.environ["TRITON_QA_CORE"] = str(args.core.resolve())
    if args.isolate and os.environ.get("TRITON_QA_ISOLATED") != "1":
        _reexec_isolated()
    client_dir = None
    if args.client_wheel is not None:
        client_dir = Path(tempfile.mkdtemp(prefix="triton_qa_client_"))
        _install_client(args.client_wheel, client_dir)
    servers = args.server or ["tcli"]
    try:
        table = _run_all(args, servers, client_dir)
    finally:
        if client_dir is not None:
            shutil.rmtree(client_dir, ignore_errors=True)
    print()
    print("| subtest | " + " | ".join(servers) + " |")
    print("|---|" + "---|" * len(servers))
    for subtest, row in table:
        print(f"| {subtest} | " + " | ".join(f"{row[s].passed}/{row[s].total}" for s in servers) + " |")
    for server in servers:
        passed = sum(row[server].passed for _, row in table)
        total = sum(row[server].total for _, row in table)
        print(f"{server}: {passed} passed, {total - passed} failed")


if __name__ == "__main__":
    main()
