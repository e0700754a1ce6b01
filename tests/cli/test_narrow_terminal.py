"""tcli in an 80-column terminal: help pages whose option names are whole, whose value placeholders are
Click's (no `<bool>`), whose paragraphs are wrapped, not broken mid-sentence; and tables that keep
model names whole, wrapping headers or leaving out columns instead of cutting."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import typer
from rich.console import Console

from tcli import render
from tcli.main import app
from tests.cli.conftest import ROOT

WIDTH = 80


def commands() -> list[tuple[list[str], Any]]:
    """Every command of tcli with the words that name it."""
    found: list[tuple[list[str], Any]] = []

    def walk(words: list[str], command: Any) -> None:
        found.append((words, command))
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk([*words, name], sub)

    walk([], typer.main.get_command(app))
    return found


def help_page(words: list[str]) -> str:
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "tcli.main", *words, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("words", "command"), commands(), ids=lambda value: " ".join(value) if isinstance(value, list) else ""
)
def test_help_pages_read_well_at_80_columns(words: list[str], command: Any) -> None:
    page = help_page(words)
    lines = page.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, page
    assert "…" not in page
    for placeholder in ("<bool>", "<str>", "<int>", "<float>", "<list["):
        assert placeholder not in page, placeholder
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                assert name in page, f"{name} is not whole in `tcli {' '.join(words)} --help`"
    # a flag named in a help text stays whole (Click's wrapper broke `--grpc-server-` / `cert`)
    assert not [line for line in lines if re.search(r"(^|\s)--[a-z0-9-]*-$", line)], page
    # every option says what it does (not just its default), and literal brackets show as brackets
    assert not re.search(r"\n  -[-a-z0-9]+ [A-Z]+ +\[default", page), page
    assert "\\[" not in page
    # the command's own options come before a group of shared ones (perf's -m before its TLS options)
    headings = [line for line in lines if line and not line.startswith(" ")]
    if "Options:" in headings and any(h.startswith("TLS") for h in headings):
        assert headings.index("Options:") < next(i for i, h in enumerate(headings) if h.startswith("TLS"))
    # the description is wrapped to the width: no line ends where the next line's first word would fit
    description = page.split("\n\n", 1)[1].split("\n\n")
    for paragraph in description[:2]:
        rows = paragraph.splitlines()
        if any(row.rstrip().endswith(":") for row in rows) or not rows[0].startswith("  "):
            continue  # a section of options, not prose
        for row, following in itertools.pairwise(rows):
            assert len(row) + 1 + len(following.split()[0]) > WIDTH - 2, (
                f"broken mid-sentence:\n{row}\n{following}"
            )


def test_serve_help_is_grouped_and_short() -> None:
    page = help_page(["serve"])
    assert len(page.splitlines()) < 225  # 200 before the OpenAI front end's group
    headings = [line for line in page.splitlines() if line and not line.startswith(" ")]
    assert headings[1:] == [
        "Arguments:",
        "Models and repositories:",
        "HTTP front end:",
        "gRPC front end:",
        "Metrics:",
        "OpenAI front end:",
        "Backends, scheduling and caching:",
        "Logging and tracing:",
        "Options:",
    ]
    assert "  --disable-auto-complete-config  Configs must be complete as written." in page
    assert "  --help " in page.split("Options:\n")[1]
    # tritonserver's completion options are general ones, not options about models
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    tritonserver = os.path.join(os.path.dirname(sys.executable), "tritonserver")
    done = subprocess.run([tritonserver, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert "--install-completion" in done.stdout.split("\nOptions:\n")[1], done.stdout


def test_flags_have_no_placeholder_and_values_have_clicks() -> None:
    page = help_page(["perf"])
    assert "\n  --strict-stability  " in page or "\n  --strict-stability\n" in page
    assert "  --measurement-interval, -p INTEGER" in page or "  -p, --measurement-interval INTEGER" in page
    assert "  --format [text|json]" in page


def rendered(table: object) -> str:
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None).print(table)
    return out.getvalue()


def test_repo_index_keeps_model_names_whole_at_80_columns() -> None:
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "tcli.main", "repo", "index", "model_repository"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= WIDTH
    assert "…" not in done.stdout
    for model in sorted(
        p.name for p in (ROOT / "model_repository").iterdir() if (p / "config.pbtxt").exists()
    ):
        assert f"│ {model} " in done.stdout, model
    assert "onnxruntime_onnx" in done.stdout and "pytorch_libtorch" in done.stdout
    assert "left out at this width: config, repository" in done.stdout


def stats_row(name: str, count: int) -> dict[str, object]:
    timing = {"count": count, "ns": count * 1_234_000}
    return {
        "name": name,
        "version": "1",
        "inference_count": count,
        "execution_count": count,
        "inference_stats": {
            "success": timing,
            "fail": {"count": 0},
            "queue": timing,
            "compute_infer": timing,
        },
    }


def test_model_stats_keeps_names_and_header_words_whole_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    names = ["simple_dyna_sequence", "digits_torchscript", "add_sub"]
    text = rendered(render.statistics_table([stats_row(name, 123456) for name in names]))
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "…" not in text
    for name in names:
        assert f"│ {name} " in text
    for word in ("model", "version", "success", "fail", "inferences", "request"):
        assert f" {word} " in text
    assert "left out at this width: avg queue us, avg infer us, executions" in text


def test_wide_terminals_get_every_column(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render.statistics_table([stats_row("add_sub", 3)]))
    text = out.getvalue()
    assert "avg queue us" in text and "executions" in text and "left out" not in text
