"""Every example of README.md, run as written: a README that drifts from the code fails `make test`.

The README's convention, which this test reads:
- A ```console block is an example. Each `$ ` line (with its `\\` continuation lines) is a command,
  and the lines up to the next `$ ` line are what it prints. The commands run in bash, in a fresh
  folder holding `model_repository/` and `examples/` of this checkout, one block after another in
  the same folder for each block (a later command sees the files an earlier one wrote).
- `tcli serve ...` and `tritonserver ...` start a server, as in another terminal: the test starts it
  in the background on free ports and waits until it is ready; the block's later commands talk to
  it, and it stops at the block's end. Ports are rewritten consistently: 8000 (HTTP), 8001 (gRPC),
  8002 (metrics) and 9000 (OpenAI) in any command, and `localhost:<port>` in a python file it runs,
  become the server's free ports, a server command without a port
  flag gets one, and a `tcli model|infer|perf` command without `-u` gets the server's address.
- `python NAME.py` runs the ```python block written just before the console block, saved as NAME.py.
- `pip install PATH` installs into the folder's own site-packages (on the path of every later command
  and server), never into the environment the suite runs in.
- Output is compared after masking what varies from run to run: numbers with a decimal point and
  numbers of three or more digits (timings, rates, counts of a run) become N; runs of spaces and of
  table rules count as one, so table widths do not matter. A line `...` stands for any lines (none
  included); `...` inside a line for any text there.
- A ```sh block is a command that needs what this checkout cannot give (a cloud bucket, an MLflow
  server, your own package, a cluster) or one of the two set-up commands (`make ...`): it is shown,
  not run. Each is listed in NOT_RUN below with the reason, so that a new one is a decision.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.cli.conftest import ROOT
from tests.torch_needed import REASON, TORCH_MISSING

pytestmark = pytest.mark.skipif(
    TORCH_MISSING, reason=f"the examples serve model_repository, which holds a TorchScript model: {REASON}"
)

README = ROOT / "README.md"
WIDTH = 80
SERVER_START_SECONDS = 180
COMMAND_SECONDS = 300

# The first command of each ```sh block, and why it is not run here.
NOT_RUN = {
    "make serve": "the set-up command itself (make test runs this test)",
    "source completions/tcli.bash": "changes the user's shell",
    "make test-oldest": "runs the whole suite on other versions",
    "make lint": "development commands (the suite runs ruff and mypy itself)",
    "tcli repo import models:/fraud@champion --repo models": "needs an MLflow tracking server and a registered model",
    "tcli serve --model-repository=s3://my-bucket/model_repository --model-control-mode=poll": "needs cloud buckets",
    "tcli perf -m simple -i grpc -u localhost:8001 --ssl-grpc-use-ssl true": "needs a TLS server and its CA file",
    "tcli serve --trace-config triton,file=/tmp/trace.json": "a trace file's content depends on the requests "
    "traced and is written as traces complete (tests/cli/test_trace_cli.py and tests/integration/test_tracing.py "
    "check it)",
    "tcli trace summary /tmp/trace.json": "reads the traces of a session with an ensemble not in model_repository "
    "(tests/cli/test_trace_cli.py checks the table)",
    "tcli analyze -m sleepy examples/analyze_repository": "a search takes minutes "
    "at perf's windows: tests/cli/test_analyze_cli.py runs it on the same model with 100 ms windows",
}


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    line: int  # where the block starts in README.md
    commands: list[Command]
    python: str | None  # the ```python block just before it


def read_blocks() -> tuple[list[Block], list[tuple[int, str]]]:
    """The console blocks, and the first command of each sh block."""
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    shown: list[tuple[int, str]] = []
    python: str | None = None
    index = 0
    while index < len(lines):
        fence = re.fullmatch(r"```(\w*)", lines[index])
        if not fence:
            index += 1
            continue
        language = fence.group(1)
        end = lines.index("```", index + 1)
        body = lines[index + 1 : end]
        if language == "console":
            blocks.append(Block(index + 1, parse_commands(body), python))
            python = None
        elif language == "python":
            python = "\n".join(body) + "\n"
        elif language == "sh" and body:
            first = parse_commands([f"$ {line}" if not line.startswith("$ ") else line for line in body[:1]])
            shown.append((index + 1, first[0].text))
            python = None
        else:
            python = None
        index = end + 1
    return blocks, shown


def parse_commands(body: list[str]) -> list[Command]:
    commands: list[Command] = []
    index = 0
    while index < len(body):
        line = body[index]
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\") and index + 1 < len(body):
                index += 1
                text = text[:-1].rstrip() + " " + body[index].strip()
            commands.append(Command(text))
        elif commands:
            commands[-1].expected.append(line)
        index += 1
    return commands


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def without_comment(text: str) -> str:
    """The command without a trailing `  # ...` comment (one outside quotes)."""
    for match in re.finditer(r"\s+#\s", text):
        before = text[: match.start()]
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return before
    return text


def shell_end(text: str) -> int:
    """Where the first command of a shell line ends: at its first `|` or `>` outside quotes."""
    for match in re.finditer(r"\s[|>]", text):
        before = text[: match.start()]
        if before.count("'") % 2 == 0 and before.count('"') % 2 == 0:
            return match.start()
    return len(text)


class Ports:
    def __init__(self) -> None:
        self.http, self.grpc, self.metrics, self.openai = free_ports(4)

    def defaults(self) -> tuple[tuple[int, int], ...]:
        return ((8000, self.http), (8001, self.grpc), (8002, self.metrics), (9000, self.openai))

    def rewrite_python(self, source: str) -> str:
        """A python example with the README's `localhost:<port>` addresses pointing at this run's."""
        for default, port in self.defaults():
            source = source.replace(f"localhost:{default}", f"localhost:{port}")
        return source

    def rewrite(self, text: str) -> str:
        """The command with the README's ports replaced by this run's."""
        text = without_comment(text)
        for default, port in self.defaults():
            text = re.sub(rf"(?<=[:=\s]){default}\b", str(port), text)
        words = text.split()
        if words[0] in ("tritonserver",) or words[:2] == ["tcli", "serve"]:
            for flag, port in (
                ("--http-port", self.http),
                ("--grpc-port", self.grpc),
                ("--metrics-port", self.metrics),
            ):
                if flag not in text:
                    text += f" {flag} {port}"
        elif words[0] == "tcli" and words[1] in ("model", "infer", "perf") and " -u " not in f" {text} ":
            grpc = re.search(r"(^|\s)-i\s+grpc\b", text) is not None
            address = f" -u localhost:{self.grpc if grpc else self.http}"
            end = shell_end(text)  # before a pipe or a redirection: the option is tcli's
            text = text[:end] + address + text[end:]
        return text


def mask(line: str) -> str:
    line = re.sub(r"\d+\.\d+(e[+-]?\d+)?|\d{3,}", "N", line)
    line = re.sub(r"([━─═]){2,}", r"\1", line)
    return re.sub(r"\s+", " ", line).strip()


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` (masked) against `actual` (masked), with `...` lines and in-line `...`."""
    patterns = [mask(line) for line in expected if line.strip()]
    lines = [mask(line) for line in actual if line.strip()]

    def line_matches(pattern: str, line: str) -> bool:
        parts = [re.escape(part) for part in pattern.split("...")]
        return re.fullmatch(".*".join(parts), line) is not None

    def walk(p: int, a: int) -> bool:
        while p < len(patterns):
            if patterns[p] == "...":
                return any(walk(p + 1, start) for start in range(a, len(lines) + 1))
            if a >= len(lines) or not line_matches(patterns[p], lines[a]):
                return False
            p, a = p + 1, a + 1
        return a == len(lines)

    return walk(0, 0)


def environment(folder: Path) -> dict[str, str]:
    return {
        **os.environ,
        "COLUMNS": str(WIDTH),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        # what a README `pip install` installed (see install_here), then this checkout
        "PYTHONPATH": os.pathsep.join((str(folder / SITE), str(ROOT))),
    }


SITE = "site-packages"


def install_here(text: str) -> str:
    """A README `pip install PATH` installs into the example folder's own SITE, which later commands
    and servers have on their path: the suite never changes the environment it runs in (nor needs
    the network: the package is built with the environment's own setuptools)."""
    flags = f"--no-deps --no-build-isolation --target {SITE}"
    return re.sub(r"^pip install\b", f"{sys.executable} -m pip install {flags}", text)


def start_server(text: str, folder: Path, ports: Ports) -> subprocess.Popen[str]:
    log = open(folder / f"server-{ports.http}.log", "w")  # noqa: SIM115 - the server writes it until stopped
    process = subprocess.Popen(
        ["bash", "-c", f"exec {text}"],
        cwd=folder,
        env=environment(folder),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"`{text}` exited with {process.returncode}:\n{(folder / log.name).read_text()}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # polling readiness, bounded by the deadline
    stop(process)
    raise AssertionError(f"`{text}` was not ready within {SERVER_START_SECONDS} s")


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


BLOCKS, SHOWN = read_blocks()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the examples run: the checkout's example repository and example files, as a reader has them."""
    where = tmp_path_factory.mktemp("readme")
    (where / "model_repository").symlink_to(ROOT / "model_repository")
    # a copy: building an example package (pip install) writes into its folder
    shutil.copytree(ROOT / "examples", where / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return where


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, tuple[Ports, subprocess.Popen[str]]]]:
    """Servers by their README command: blocks that start the same one share it (each start loads
    every example model), as a reader keeps `make serve` running while following the README."""
    running: dict[str, tuple[Ports, subprocess.Popen[str]]] = {}
    try:
        yield running
    finally:
        for _, process in running.values():
            stop(process)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"line{block.line}")
def test_readme_example(
    block: Block, folder: Path, servers: dict[str, tuple[Ports, subprocess.Popen[str]]]
) -> None:
    ports = Ports()
    for command in block.commands:
        words = without_comment(command.text).split()
        if words[0] == "python" and words[1].endswith(".py") and block.python is not None:
            (folder / words[1]).write_text(ports.rewrite_python(block.python))
        if words[0] == "tritonserver" or words[:2] == ["tcli", "serve"]:
            assert not [line for line in command.expected if line.strip()], (
                "a server's output is not compared"
            )
            key = " ".join(words)
            if key in servers and servers[key][1].poll() is None:
                ports = servers[key][0]
            else:
                servers[key] = (ports, start_server(ports.rewrite(command.text), folder, ports))
            continue
        text = install_here(ports.rewrite(command.text))
        done = subprocess.run(
            ["bash", "-c", text],
            cwd=folder,
            env=environment(folder),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_SECONDS,
        )
        actual = done.stdout.splitlines()
        assert matches(command.expected, actual), (
            f"README.md line {block.line}: `{command.text}` (run as `{text}`, exit code {done.returncode}) "
            "printed:\n" + "\n".join(actual) + "\n\nwhere the README shows:\n" + "\n".join(command.expected)
        )


def test_every_prompt_is_in_a_console_or_sh_block() -> None:
    """A `$ ` command in a block of another kind would be an example no test runs or lists."""
    lines = README.read_text(encoding="utf-8").splitlines()
    language = None
    for number, line in enumerate(lines, 1):
        fence = re.fullmatch(r"```(\w*)", line)
        if fence:
            language = None if language is not None else fence.group(1)
            continue
        if language is not None and line.startswith("$ "):
            assert language in ("console", "sh"), (
                f"README.md line {number}: `{line}` in a ```{language} block"
            )


def test_every_block_not_run_is_listed_with_its_reason() -> None:
    firsts = [text for _, text in SHOWN]
    for line, text in SHOWN:
        assert any(text.startswith(prefix) for prefix in NOT_RUN), (
            f"README.md line {line}: the sh block `{text}` is not run: make it a console block, or add it "
            "to NOT_RUN with the reason"
        )
    for prefix in NOT_RUN:
        assert any(text.startswith(prefix) for text in firsts), (
            f"NOT_RUN lists `{prefix}`, no longer in README.md"
        )


def test_the_masking_keeps_what_does_not_vary() -> None:
    assert matches(["│ simple │ 1 │ 3 │ 163 │ 4.5 │"], ["│ simple   │ 1 │  3 │ 98765 │ 0.25 │"])
    assert not matches(["│ simple │ 1 │ 3 │"], ["│ simple │ 1 │ 4 │"])
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert matches(
        ["Concurrency: 1, throughput: 5.1 infer/sec, latency 900 usec..."],
        ["Concurrency: 1, throughput: 7.5 infer/sec, latency 1234 usec (not stable)"],
    )


def test_ports_are_rewritten_consistently() -> None:
    ports = Ports()
    assert ports.rewrite("tcli model config add_sub | grep count") == (
        f"tcli model config add_sub -u localhost:{ports.http} | grep count"
    )
    assert ports.rewrite("tcli infer -m simple -i grpc -u localhost:8001 --async") == (
        f"tcli infer -m simple -i grpc -u localhost:{ports.grpc} --async"
    )
    assert ports.rewrite("tcli serve model_repository --http-port 8000   # in another terminal") == (
        f"tcli serve model_repository --http-port {ports.http} --grpc-port {ports.grpc} "
        f"--metrics-port {ports.metrics}"
    )
    assert ports.rewrite("curl -s localhost:8002/metrics | grep '^nv_'") == (
        f"curl -s localhost:{ports.metrics}/metrics | grep '^nv_'"
    )
