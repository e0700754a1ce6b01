"""Help pages that read well in an 80-column terminal, whichever Typer version renders them.

Click's plain layout, not Rich's panels: Rich's option table cuts long option names at narrow widths
(`--disable-auto-co…`) and keeps the line breaks of a docstring, while Click's puts a long name on a
line of its own and rewraps every paragraph to the terminal. Options are grouped under the headings
their `rich_help_panel` names, and value placeholders are Click's (TEXT, INTEGER, [a|b]) on every
Typer version; flags have none.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import Any, ClassVar

from typer.core import TyperCommand

# Typer >= 0.2x writes <str>, <int>, <list[str]>, <a|b>; older Typer (Click's own) TEXT, INTEGER, [a|b]
_TYPER_PLACEHOLDERS = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "bool": "BOOLEAN"}
_PLACEHOLDER = re.compile(r"<(?:list\[)?([^<>\[\]]+?)\]?>(\.\.\.)?$")


def placeholder(names: str) -> str:
    """The names column of a help record with Click's value placeholder."""
    match = _PLACEHOLDER.search(names)
    if match is None:
        return names
    inner = match.group(1)
    value = f"[{inner}]" if "|" in inner else _TYPER_PLACEHOLDERS.get(inner.lower(), inner.upper())
    return names[: match.start()] + value + (match.group(2) or "")


class HelpCommand(TyperCommand):
    """A command whose --help is Click's layout with headed groups of options: the group a parameter's
    `rich_help_panel` names, else the one `group_of` gives its name (see `grouped`), else "Options"."""

    group_of: ClassVar[Callable[[str], str | None] | None] = None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        self.format_options(ctx, formatter)
        self.format_epilog(ctx, formatter)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, text = record
            row = (placeholder(names), text)
            if param.param_type_name == "argument":
                arguments.append(row)
            else:
                grouping = type(self).group_of
                group = getattr(param, "rich_help_panel", None)
                if group is None and grouping is not None and param.name != "help":
                    group = grouping(param.name or "")
                groups.setdefault(group or "Options", []).append(row)
        if arguments:
            with formatter.section("Arguments"):
                write_dl(formatter, arguments)
        # the ungrouped options come first when they are the command's own (perf's -m before its TLS
        # group), last when they are only --help and the completion options (tritonserver's)
        own = any(not names.startswith(_GENERAL) for names, _ in groups.get("Options", []))
        for title in sorted(groups, key=lambda name: (name == "Options") != own):
            with formatter.section(title):
                write_dl(formatter, groups[title])


_GENERAL = ("--help", "--install-completion", "--show-completion")


def write_dl(formatter: Any, rows: list[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
    """Click's definition list (names, then their help beside or below), with the help wrapped at
    spaces only: Click's wrapper also breaks at hyphens, cutting flag names in two
    (`--grpc-server-` / `cert`)."""
    first_col = min(max((len(names) for names, _ in rows), default=0), col_max) + col_spacing
    indent = formatter.current_indent
    width = max(formatter.width - first_col - 2, 10)
    for names, text in rows:
        formatter.write(f"{'':>{indent}}{names}")
        if not text:
            formatter.write("\n")
            continue
        if len(names) <= first_col - col_spacing:
            formatter.write(" " * (first_col - len(names)))
        else:
            formatter.write("\n" + " " * (first_col + indent))
        lines = textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)
        formatter.write(f"{lines[0]}\n" if lines else "\n")
        for line in lines[1:]:
            formatter.write(f"{'':>{first_col + indent}}{line}\n")


def grouped(group_of: Callable[[str], str | None]) -> type[HelpCommand]:
    """A HelpCommand whose options are grouped by `group_of(parameter name)` (None: "Options")."""
    return type("GroupedHelpCommand", (HelpCommand,), {"group_of": staticmethod(group_of)})
