"""The in-process server's log, as `tritonserver`'s log options shape it: tcli's log lines (the "tcli"
logger and those below it) in Triton's format, the severities the options switch on, to `log_file` or
standard error. `tritonserver`'s defaults log nothing; its log is its own, apart from the program's:
while a server's log is installed, tcli's lines go there only, not on to the program's own logging
(whose handlers would write them a second time). The severities are read live from the service's
settings, so a change through the logging API (POST /v2/logging on a front end) acts at once.

One log per process, as Triton's: the server started last writes it. When it stops, the log of the
server started before it, if that one still runs, writes again; when none runs, the program's own
logging has tcli's lines again.
"""

from __future__ import annotations

import logging
import sys

from server.logs import LogSettings, SeverityFilter, TritonFormatter, apply_verbosity
from tcli.inprocess._errors import InternalError

_LOGGER = logging.getLogger("tcli")


class InstalledLog:
    def __init__(self, settings: LogSettings) -> None:
        try:
            self.handler: logging.Handler = (
                logging.FileHandler(settings.log_file, encoding="utf-8")
                if settings.log_file
                else logging.StreamHandler(sys.stderr)
            )
        except OSError as error:  # tritonserver: Internal, when its log file cannot be opened
            raise InternalError(
                f"failed to open log file {settings.log_file}: {error.strerror or error}; give a writable path"
            ) from None
        self.settings = settings
        self.handler.setFormatter(TritonFormatter(settings))
        self.handler.addFilter(SeverityFilter(settings))

    def remove(self) -> None:
        """The server stopped: its log goes (the one before it, if still installed, writes again)."""
        if self not in _installed:
            return
        current = _installed[-1] is self
        _installed.remove(self)
        self.handler.close()
        if not current:
            return
        _LOGGER.removeHandler(self.handler)
        if _installed:
            _use(_installed[-1])
        elif _saved is not None:  # the program's own logging, as it was before the first server's log
            _LOGGER.propagate, level = _saved
            _LOGGER.setLevel(level)


_installed: list[InstalledLog] = []  # oldest first; the last one writes
_saved: tuple[bool, int] | None = None  # the "tcli" logger's propagate and level before any was installed


def _use(log: InstalledLog) -> None:
    _LOGGER.addHandler(log.handler)
    _LOGGER.propagate = False
    apply_verbosity(log.settings)


def install(settings: LogSettings) -> InstalledLog:
    """Write tcli's log as `settings` say until the returned log is removed (its server stops)."""
    global _saved
    log = InstalledLog(settings)
    if _installed:
        _LOGGER.removeHandler(_installed[-1].handler)
    else:
        _saved = (_LOGGER.propagate, _LOGGER.level)
    _installed.append(log)
    _use(log)
    return log
