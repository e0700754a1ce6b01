"""The in-process API's way into a started server: every call runs on the server's event loop, where
the front ends' calls run, and requests in flight are tracked so that stopping can end them. `Server`
owns one and each of its `Model`s holds it: a model's call after stop() is "Server not started", and
works again once the server is started again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from server.protocol.errors import TritonError as ServerError
from tcli.inprocess._errors import InvalidArgumentError, UnavailableError, from_server

if TYPE_CHECKING:
    from server.app import Server as AppServer
    from server.service import InferenceService
    from tcli.inprocess._flight import Flight
    from tcli.inprocess._log import InstalledLog

T = TypeVar("T")


class Stoppable(Protocol):
    def end(self) -> None: ...


class Connection:
    def __init__(self) -> None:
        self.app: AppServer | None = None  # set while the server runs
        self._loop_thread = 0
        self._flights: set[Flight] = set()
        self.frontends: list[Stoppable] = []
        self.log: InstalledLog | None = None
        self._lock = threading.Lock()

    def attach(self, app: AppServer, log: InstalledLog) -> None:
        self.app = app
        self.log = log
        self._loop_thread = self.on_loop(threading.get_ident)

    def detach(self) -> None:
        self.app = None
        self._loop_thread = 0
        if self.log is not None:
            self.log.remove()
            self.log = None

    def started(self) -> AppServer:
        if self.app is None:
            raise InvalidArgumentError("Server not started: call start() first, or use `with Server(...)`")
        return self.app

    def service(self) -> InferenceService:
        return self.started().service

    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self.started().loop
        assert loop is not None  # a started server has its loop
        if threading.get_ident() == self._loop_thread:
            raise UnavailableError(
                "the in-process API was called on the server's own event loop, which would wait on "
                "itself: call it from another thread (a python model: use BLS, pb_utils.InferenceRequest)"
            )
        return loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the server's loop and wait for it; server errors as the API's."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop())
        try:
            return future.result()
        except ServerError as error:
            raise from_server(error) from None

    def on_loop(self, call: Callable[[], T]) -> T:
        async def run() -> T:
            return call()

        return self.run(run())

    def submit(self, flight: Flight) -> Flight:
        """Start a request on the server's loop, tracked until it finishes."""
        service, loop = self.service(), self.loop()
        request = flight.request
        decoupled = service.is_decoupled(request.model_name, request.model_version)
        with self._lock:
            self._flights.add(flight)
        flight.start(service, loop, decoupled)
        assert flight.future is not None
        flight.future.add_done_callback(lambda _: self._forget(flight))
        return flight

    def _forget(self, flight: Flight) -> None:
        with self._lock:
            self._flights.discard(flight)
        # the future's callbacks hold the flight, which holds the future: let go of it, or each request
        # (its tensors, its task) waits for the cycle collector instead of going when its last response is
        # read (Triton's leak check counts what waits)
        flight.future = None

    def end_flights(self, error: ServerError) -> bool:
        """End every request still in flight with `error` (the server is stopping); True if any was."""
        with self._lock:
            left = [
                flight for flight in self._flights if flight.future is not None and not flight.future.done()
            ]
        for flight in left:
            flight.cancel(error)
        return bool(left)

    # front ends started on the running server (tcli.frontend): stopped before it stops
    def add_frontend(self, frontend: Stoppable) -> None:
        self.frontends.append(frontend)

    def remove_frontend(self, frontend: Stoppable) -> None:
        if frontend in self.frontends:
            self.frontends.remove(frontend)

    def stop_frontends(self) -> None:
        for frontend in list(self.frontends):
            frontend.end()
