"""The server's log as tritonserver's logging flags and its logging API shape it: which severities
are written (--log-info, --log-warning, --log-error, --log-verbose), the line format (--log-format
default or ISO8601) and where (--log-file, or the console). The settings are read live by a filter
on the handler, so a change through POST /v2/logging takes effect on the next line."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class LogSettings:
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SeverityFilter(logging.Filter):
    """Drops the severities the settings switch off; DEBUG is verbose logging (level >= 1)."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        level = record.levelno
        if level < logging.INFO:
            return self.settings.log_verbose_level > 0
        if level < logging.WARNING:
            return self.settings.log_info
        if level < logging.ERROR:
            return self.settings.log_warning
        return self.settings.log_error


class TritonFormatter(logging.Formatter):
    """`I1125 11:23:14.760109 logger] message` (default) or `2026-11-25T11:23:14Z I logger] message`."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def format(self, record: logging.LogRecord) -> str:
        severity = record.levelname[:1]
        if self.settings.log_format == "ISO8601":
            head = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)) + f" {severity}"
        else:
            stamp = time.strftime("%m%d %H:%M:%S", time.localtime(record.created))
            head = f"{severity}{stamp}.{int(record.created % 1 * 1e6):06d}"
        text = f"{head} {record.name}] {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


_HANDLER_NAME = "tcli-log"


def configure(settings: LogSettings) -> None:
    """One handler on the root logger (the console, or the log file) that follows `settings`."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()
    handler: logging.Handler = (
        logging.FileHandler(settings.log_file, encoding="utf-8")
        if settings.log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(TritonFormatter(settings))
    handler.addFilter(SeverityFilter(settings))
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # libraries' debug output (watchdog, hpack, botocore) stays out
    apply_verbosity(settings)


# the per-request lines (--log-verbose 2) go to a logger of their own: the request path asks it
# `isEnabledFor(DEBUG)` (a cached lookup) before it builds a line
REQUESTS_LOGGER = "tcli.requests"


def apply_verbosity(settings: LogSettings) -> None:
    """Verbose logging is tcli's own debug output: level 1 the lifecycle of models (load steps,
    instances, the scheduler chosen), level 2 each request and execution as well."""
    level = settings.log_verbose_level
    logging.getLogger("tcli").setLevel(logging.DEBUG if level > 0 else logging.INFO)
    logging.getLogger(REQUESTS_LOGGER).setLevel(logging.DEBUG if level > 1 else logging.INFO)
