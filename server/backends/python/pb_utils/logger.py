"""Logger: Triton's python Logger, on Python logging (logger "tcli.python_model")."""

from __future__ import annotations

import enum
import logging

from server.backends.python.pb_utils.scope import current_model_scope

_LOG = logging.getLogger("tcli.python_model")


class LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_Level = LogLevel  # for annotations inside Logger, where the name LogLevel is the class attribute

_PY_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


def _emit(message: str, level: _Level) -> None:
    if not isinstance(message, str):
        raise TypeError(f"Logger: message must be a str, got {type(message).__name__}")
    scope = current_model_scope()
    extra = {"model_name": scope.model_name, "model_version": scope.model_version} if scope else None
    # stacklevel 3: the record names the model's file and line, as Triton's log lines do
    _LOG.log(_PY_LEVELS[LogLevel(level)], message, stacklevel=3, extra=extra)


class Logger:
    """`pb_utils.Logger.log_info(msg)`, `.log_warn`, `.log_error`, `.log_verbose` (DEBUG in Python
    logging), and `Logger.log(msg, level=Logger.INFO)`."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _Level = LogLevel.INFO) -> None:
        if not isinstance(level, LogLevel):
            raise TypeError("Logger.log(): level must be Logger.INFO, WARNING, ERROR or VERBOSE")
        _emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE)
