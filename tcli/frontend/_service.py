"""What the three front ends of `tcli.frontend` share: they start on a running in-process server
(`tcli.inprocess.Server`), on its event loop, as the same front ends `tcli serve` runs; `start()`,
`stop()` and `with` as `tritonfrontend`'s; errors as `tritonserver`'s exception classes with Triton's
texts (a port in use: UnavailableError "Socket '<address>:<port>' already in use", a second start:
AlreadyExistsError). A server stops the front ends still running on it before it stops.

Options are checked when they are made, as `tritonfrontend`'s (pydantic) are: a wrong type or a value
out of range is a ValueError naming the field and what it takes.

Both shapes `tritonfrontend` has had make a front end: `KServeHttp(server, options)` (r24.11 on) and
Triton 2.51's (r24.10) `KServeHttp.Server(server=..., options=...)`; `Server` is the class itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from tcli.inprocess import AlreadyExistsError, InvalidArgumentError, UnavailableError
from tcli.inprocess import Server as InProcessServer
from tcli.inprocess._connection import Connection

log = logging.getLogger("tcli.frontend")


class OptionsError(ValueError):
    """A front end option of the wrong type or out of range."""


def check(options: Any, field: str, ok: Callable[[Any], bool], wanted: str) -> None:
    value = getattr(options, field)
    if not ok(value):
        raise OptionsError(f"{type(options).__qualname__}.{field} must be {wanted}, got {value!r}")


def is_int(value: Any, low: int, high: int | None = None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and low <= value
        and (high is None or value <= high)
    )


def check_common(options: Any, counts: tuple[str, ...] = ()) -> None:
    """address, port, and the given thread counts (above 0)."""
    check(options, "address", lambda v: isinstance(v, str), "a str")
    check(options, "port", lambda v: is_int(v, 0, 65535), "an int from 0 to 65535 (0: any free port)")
    for field in counts:
        check(options, field, lambda v: is_int(v, 1), "an int above 0")


def no_effect(name: str, field: str, value: Any) -> None:
    log.warning(
        "%s.Options.%s=%r has no effect in tcli (tcli serve ignores its flag too)", name, field, value
    )


class Service:
    """A front end on an in-process server; subclasses say what they serve (`_serve`)."""

    kind = "HTTP"  # as Triton names the server in its errors
    # Triton 2.51's shape, `KServeHttp.Server(server=..., options=...)`: the front end's own class
    Server: ClassVar[Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.Server = cls

    def __init__(self, server: InProcessServer, options: Any, options_type: type, name: str) -> None:
        if not isinstance(server, InProcessServer):
            raise InvalidArgumentError(
                f"{name} serves a tcli.inprocess.Server, not {type(server).__name__}: start one and pass it"
            )
        if options is None:
            options = options_type()
        if not isinstance(options, options_type):
            raise InvalidArgumentError(
                f"Incorrect type for options. options argument must be of type {name}.Options"
            )
        self._connection: Connection = server._connection
        self._connection.started()  # "Server not started", as tritonfrontend says of an unstarted one
        self.options: Any = options
        self._handle: Any = None
        self._ended = False

    @property
    def port(self) -> int | None:
        """The port it listens on while it runs (the one chosen when Options(port=0))."""
        return None if self._handle is None else int(self._handle.port)

    def start(self) -> None:
        if self._handle is not None:
            raise AlreadyExistsError(f"{self.kind} server is already running.")
        self._ended = False
        address, port = self.options.address, self.options.port
        try:
            self._handle = self._connection.run(self._serve(self._connection.started()))
        except OSError as error:
            raise UnavailableError(
                f"Socket '{address}:{port}' already in use ({(error.strerror or str(error)).lower()}): give "
                "Options(port=...) another port, or 0 for any free one"
            ) from None
        self._connection.add_frontend(self)

    def stop(self) -> None:
        if self._handle is None:
            if self._ended:  # its server stopped it: stopping it again, as Triton's tests do, is fine
                return
            raise UnavailableError(f"{self.kind} server is not running.")
        handle, self._handle = self._handle, None
        self._connection.remove_frontend(self)
        self._connection.run(handle.shutdown())

    def end(self) -> None:
        """Stopped by its server, which is stopping."""
        self.stop()
        self._ended = True

    def __enter__(self) -> Service:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, app: Any) -> Coroutine[Any, Any, Any]:
        raise NotImplementedError
