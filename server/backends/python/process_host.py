"""A python model instance in its own process (`ProcessModel`), so that instances of a pure-Python
model run in parallel instead of taking turns on one GIL, as Triton's python backend runs every
instance in a stub process.

To the runner it is a RequestModel like the in-thread `PythonModel`, with two ways in: a worker
thread calls execute_channels(), which hands the batch to the instance process and waits (without
the GIL) for the result; or the event loop calls start_batch(), which hands the batch over and
returns, its callback getting the results later on the loop (`server.scheduling.dispatch`: no
thread between the front end and the process, each of which would cost a GIL switch per request).
The instance process (`process_worker`, forked from the preloaded zygote of `process_life`, never
from the threaded server) imports model.py with our
pb_utils, runs initialize() with the same args as in-thread, execute() per batch and finalize() at
unload. Tensors go both ways through shared memory (`shm`); the pipes carry small tuples.

Everything the process sends comes through one pipe, in order (the output ring is read in that
order): the batch's results, the responses its response senders send (passed on to the request's
channel as they come, so decoupled models stream), log records, and calls (a BLS request, run here
by the server's BLS hook; a model load; a larger output ring), answered over a second
pipe, which also carries the news that a request's client went away (`InferenceRequest.cancel`). A
reader thread reads that pipe until the first start_batch() from an event loop; then the
loop reads it (`loop.add_reader`), and the thread ends (a "handover" message, echoed by the process,
marks the point so that no message is read twice or lost).

When the process dies (a crash, os._exit in the model), the requests in flight fail with one line
naming the model and instance, and the next batch starts a new process (initialize() again). A frame
that does not decode fails the requests it carried (its fixed head names them) and nothing else; a
stream that cannot be trusted any more (bytes that are no message, a message left half-written, a
frame whose head names no batch) ends the process, as a crash would, with the cause. Its exit is
watched apart from its pipe, which a child of it may hold open.

Long: `_Process` is one protocol, what crosses the two pipes in which order and who reads them when,
and its parts (sending batches, reading results, answering the process's calls, the handover to the
loop and back, the end) share its tables under one lock; split, each part would reach into the
others' state. Starting and ending a process (`process_life`) and the worker side are apart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import itertools
import logging
import os
import pickle
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from server.backends.base import (
    InstanceSpec,
    LoopRequestModel,
    ModelContext,
    NotStarted,
    ResponseChannel,
    tcli_bug,
)
from server.backends.python import execution_env, hop_frames, process_life, readiness
from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.backend_settings import python_settings
from server.backends.python.host import HostSpec, answered
from server.backends.python.metric_forwarding import ForwardedMetrics
from server.backends.python.pb_utils import model_control as pb_model_control
from server.backends.python.pb_utils import scope as pb_scope
from server.backends.python.pipe_reader import BrokenStream, MessageReader, pipe_pairs, write_message
from server.backends.python.process_life import exit_text, instance_context, server_state
from server.backends.python.shm import InputArena, RingReader, fits_inline
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceResponse

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from server.protocol.types import InferenceRequest

_LOG = logging.getLogger("tcli.python_process")
_STOP_SECONDS = 30.0
# after its process exited, how long its stream may take to end by itself (a process it started may
# hold the pipe open) before it is ended here
_EXIT_GRACE_S = 2.0
# an instance whose process dies this often within the window is not started again: its version
# becomes UNAVAILABLE with the reason, instead of restarting forever
CRASH_LIMIT, CRASH_WINDOW_S = 5, 60.0
# An instance writes each message with one send_bytes(), whose writes go on as fast as the server reads
# them, with nothing to wait for but the GIL; a message left half-written this long means a writer
# that is stuck or died with a child still holding the pipe, and the requests it carries would wait
# forever. Far above a loaded machine's scheduling delays, within the deadlines clients set.
PARTIAL_MESSAGE_SECONDS = 10.0
# the plain (C) pickler: Connection.send's ForkingPickler is several times slower on small messages
_PROTOCOL = pickle.HIGHEST_PROTOCOL  # finalize() gets this long before the process is terminated

Result = InferenceResponse | TritonError | None
_FIRST_IN_FLIGHT = -1  # not a batch id (they count from 1)
Done = Callable[[list[Result]], None]


class ProcessModel(LoopRequestModel):
    """One instance of a python model, hosted by a process of its own."""

    # inline_ok stays False: execute() waits on another process, never on the server's event loop

    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:
        self._spec = HostSpec.of(context, instance)
        self.settings = python_settings(context.backend_config)
        self.environment = execution_env.prepare(context.config, context.model_dir)  # EXECUTION_ENV_PATH
        self.name = self._spec.name
        self.version = self._spec.version
        # one scope per instance: BLS (server/bls.py) tells the instances waiting on its requests apart by it
        self._scope = pb_scope.ModelScope(self.name, self.version, self._spec.version_dir)
        self.instance = instance.name
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(self._spec.config_json)
        # one batch at a time per instance: one arena for every process
        self._inputs = InputArena(self.settings)
        self._batch_ids = itertools.count(1)
        self._deaths: collections.deque[float] = collections.deque(maxlen=CRASH_LIMIT)
        self._gave_up: TritonError | None = None  # set once the process died too often
        self._instance_failed = context.instance_failed
        self._revive_lock = threading.Lock()  # one start at a time, and none after unload()
        self._unloaded = False
        self._process: _Process | None = None
        try:
            self._process = _Process(self)
        except BaseException:
            self._inputs.close()
            raise

    def serves_scope(self, scope: object) -> bool:
        return scope is self._scope

    @property
    def pid(self) -> int | None:
        """The instance process's id (None between a crash and the next batch)."""
        process = self._process
        return None if process is None or process.dead else process.pid

    def segments(self) -> list[str]:
        """Names of the shared-memory segments this instance holds now."""
        names = [] if self._inputs.segment is None else [self._inputs.segment.name]
        process = self._process
        if process is not None and process.ring.segment is not None:
            names.append(process.ring.segment.name)
        return names

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse | TritonError]:
        return answered(self.name, self.execute_channels(requests, None))

    def start_batch(
        self,
        requests: list[InferenceRequest],
        channels: Sequence[ResponseChannel] | None,
        done: Done,
        loop: asyncio.AbstractEventLoop,
    ) -> bool:
        """Hand the batch to the instance process and return; `done(results)` follows once, as
        execute_channels() would return them, on `loop` (its thread reads the process from then
        on). False, having done nothing, when the process is not running: execute_channels() starts
        a new one (which takes a while: not on the loop)."""
        process = self._process
        if process is None or process.dead:
            return False
        process.attach(loop)
        process.start(next(self._batch_ids), requests, channels, self._inputs, done)
        return True

    def can_queue(self, requests: list[InferenceRequest]) -> bool:
        """Whether a batch may be sent while another one runs: the process is up and the inputs ride
        in the message (the input arena holds one batch, which the process may not have read yet)."""
        process = self._process
        if process is None or process.dead:
            return False
        return fits_inline([t for r in requests for t in r.inputs])

    def execute_channels(
        self, requests: list[InferenceRequest], channels: Sequence[ResponseChannel] | None
    ) -> list[Result]:
        """As PythonModel.execute_channels, in the instance process (started again if it died)."""
        process = self._process
        if process is None or process.dead:
            error = self.revive()
            process = self._process
            if error is not None or process is None:
                return [error or self._unloaded_error()] * len(requests)
        return process.run(next(self._batch_ids), requests, channels, self._inputs)

    def revive(self) -> TritonError | None:
        """Start the instance's process again when it is down (its start takes a while: never on the
        event loop); None once it runs, else why it does not."""
        with self._revive_lock:
            process = self._process
            if process is not None and not process.dead:
                return None
            if self._gave_up is not None:
                return self._gave_up
            if self._unloaded:
                return self._unloaded_error()
            if process is not None:
                process.close()
                self._process = None
            try:
                self._process = _Process(self)
            except TritonError as error:
                if f"instance '{self.instance}'" in error.message:
                    return error
                named = f"python model '{self.name}' instance '{self.instance}' did not start again: "
                return TritonError(error.code, named + error.message)
        return None

    def _unloaded_error(self) -> TritonError:
        return TritonError(
            ErrorCode.UNAVAILABLE, f"python model '{self.name}' instance '{self.instance}' is unloaded"
        )

    def died(self, exit_code: int | None) -> None:
        """Its process died unexpectedly (called once per death, by the process's reader): after
        CRASH_LIMIT deaths within CRASH_WINDOW_S the instance is not started again."""
        now = time.monotonic()
        self._deaths.append(now)
        if len(self._deaths) < CRASH_LIMIT or now - self._deaths[0] > CRASH_WINDOW_S:
            return
        reason = (
            f"python model '{self.name}' instance '{self.instance}': its process died {CRASH_LIMIT} times "
            f"within {CRASH_WINDOW_S:.0f} s (last {exit_text(exit_code)}); it is not restarted: fix the "
            "model and load it again"
        )
        self._gave_up = TritonError(ErrorCode.UNAVAILABLE, reason)
        _LOG.error("%s", reason)
        if self._instance_failed is not None:
            self._instance_failed(reason)

    def ready(self) -> bool:
        """Not ready while its process is down (Triton: stub not healthy), else is_model_ready()."""
        process = self._process
        return process is not None and not process.dead and (not process.has_readiness or process.ready())

    def unload(self) -> None:
        with self._revive_lock:  # a process being started again is stopped too
            self._unloaded = True
            process, self._process = self._process, None
        if process is not None:
            process.stop()
        self._inputs.close()


class _Unknown:
    """Whatever the server cannot import, standing in while a message is read for its call id."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass


class _Lenient(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except Exception:
            return _Unknown


def _call_of(data: bytes) -> tuple[int, str] | None:
    """(call id, kind) of a pickled call that does not unpickle, read past what it names that the
    server cannot import; None for another message, or one unreadable even so."""
    try:
        message = _Lenient(io.BytesIO(data)).load()
    except Exception:
        return None
    if isinstance(message, tuple) and len(message) > 2 and message[0] == "call":
        return message[1], str(message[2])
    return None


class _Batch:
    __slots__ = ("done", "senders", "size")

    def __init__(self, size: int, senders: bool, done: Done) -> None:
        self.size = size
        self.senders = senders
        self.done = done  # called once, from the thread that reads the process


class _Process:
    """One process of an instance, from its start to its end."""

    def __init__(self, owner: ProcessModel) -> None:
        self.owner = owner
        self.dead = False
        self._stopping = False
        self._lock = threading.Lock()  # the tables below, and `dead`
        self._send_lock = threading.Lock()  # the batch pipe
        self._answer_lock = threading.Lock()  # the answer pipe
        self._batches: dict[int, _Batch] = {}
        self._channels: dict[tuple[int, int], ResponseChannel] = {}  # senders still open
        self._bls_streams: dict[int, pb_utils.ResponseIterator] = {}
        self._ready: Future[str | None] = Future()
        self._started = threading.Event()  # the process is up and talking (stub-timeout-seconds)
        self.has_readiness = False  # the model defines is_model_ready()
        self._probes: dict[int, Future[bool]] = {}
        self._probe_ids = itertools.count(1)
        self._gone = threading.Event()  # set once _ended() has answered for everything in flight
        # who reads the process: the reader thread, then (after the handover) `_loop`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handed_over = False
        self._on_loop = False  # registered with the loop's reader callbacks
        self._eof = False  # nothing more is read from the process (its end, or a broken stream)
        self._cause: str | None = None  # why the server ended the process, when it did
        # the batch it ran when it broke, as the process tells (None: none); else the first in flight
        self._running: int | None = _FIRST_IN_FLIGHT
        self._stall_check: asyncio.TimerHandle | None = None  # a partial message on the loop
        self._closed = False
        self._close_lock = threading.Lock()  # close() and _watch_exit()
        self._ending = False  # _ended() has begun
        self.ring = RingReader(owner.settings)
        self.metrics = ForwardedMetrics()  # its custom metrics, released when it ends
        from server.backends.python import process_worker

        # a model with an execution environment runs under that environment's python, not the zygote
        environment_context = execution_env.process_context(owner.environment)
        context = environment_context or instance_context()
        # a forked child takes the server's environment and directory of now; a started one has them
        state = server_state() if environment_context is None else None
        self._conn, child_conn = pipe_pairs(context)
        child_answers, self._answers = context.Pipe(duplex=False)
        levels = {
            "": logging.getLogger().getEffectiveLevel(),
            # every pb_utils.Logger line, verbose too: the server's handler drops what its log
            # settings switch off when the line arrives, so `POST /v2/logging` applies at once
            # (a level fixed here kept VERBOSE lines out after log_verbose_level turned 1)
            "tcli.python_model": logging.DEBUG,
        }
        self._process: BaseProcess = context.Process(
            target=process_worker.main,
            args=(child_conn, child_answers, owner._spec, self.ring.segment_name, levels, state),
            name=f"tcli-python-{owner.instance}",
            daemon=True,  # gone with the server, even when it exits without unloading
        )
        try:
            process_life.start(self._process)  # refused once the server is ending
        except BaseException:
            self.ring.close()
            for conn in (self._conn, self._answers, child_conn, child_answers):
                conn.close()
            raise
        child_conn.close()
        child_answers.close()
        self._messages = MessageReader(self._conn.fileno())
        self._inbox: collections.deque[bytes] = collections.deque()  # read, not handled yet
        self.pid = self._process.pid
        self._reader = self._start_reader()
        threading.Thread(target=self._watch_exit, name=f"{owner.instance}_exit", daemon=True).start()
        if not self._started.wait(owner.settings.stub_timeout_seconds):
            self._process.kill()  # its end settles _ready
            self._ready.result()
            self.stop()
            raise TritonError(
                ErrorCode.INTERNAL,
                f"python model '{owner.name}' instance '{owner.instance}': its process did not start within "
                f"{owner.settings.stub_timeout_seconds:.0f} s (--backend-config=python,stub-timeout-seconds)",
            )
        error = self._ready.result()
        if error is not None:
            self.stop()
            raise TritonError(ErrorCode.INTERNAL, error)
        process_life.serving(self._process)

    def _start_reader(self) -> threading.Thread:
        owner = self.owner
        reader = threading.Thread(
            target=self._read, name=f"{owner.name}_{owner.version}_{owner.instance}_pipe", daemon=True
        )
        reader.start()
        return reader

    # the side that hands batches over ----------------------------------------------------------------
    def start(
        self,
        batch_id: int,
        requests: list[InferenceRequest],
        channels: Sequence[ResponseChannel] | None,
        arena: InputArena,
        done: Done,
    ) -> None:
        """Send one batch (the instance's only one: the arena holds its inputs until the process has
        read them); `done` gets its results."""
        self._reclaim_from_closed_loop()
        # encoded first: a value that cannot be encoded fails the batch before anything waits on it
        try:
            message = hop_frames.encode_exec(batch_id, requests, channels is not None, arena)
        except TritonError:
            raise
        except Exception as exc:  # a bug of ours: the answer names the instance, the log has the traceback
            where = f"python model '{self.owner.name}' instance '{self.owner.instance}'"
            _LOG.error("tcli bug sending a batch to %s", where, exc_info=exc)
            raise TritonError(ErrorCode.INTERNAL, f"{where}: {tcli_bug(exc).message}") from None
        with self._lock:
            dead = self.dead
            if not dead:
                self._batches[batch_id] = _Batch(len(requests), channels is not None, done)
                for index, channel in enumerate(channels or ()):
                    self._channels[batch_id, index] = channel
        if dead:  # it died before this batch reached it: another try may run it
            done([NotStarted(self.owner.name, self.owner.instance)] * len(requests))
            return
        with contextlib.suppress(OSError), self._send_lock:  # it just died: _ended() answers for it
            write_message(self._conn.write_fileno(), message)
        for index, request in enumerate(requests):  # over the answer pipe, read even while it executes
            request.when_cancelled(partial(self._send_answer, ("cancel", batch_id, index)))

    def run(
        self,
        batch_id: int,
        requests: list[InferenceRequest],
        channels: Sequence[ResponseChannel] | None,
        arena: InputArena,
    ) -> list[Result]:
        """start() and wait for the results (a worker thread's way)."""
        results: queue.SimpleQueue[list[Result]] = queue.SimpleQueue()
        self.start(batch_id, requests, channels, arena, results.put)
        return results.get()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have `loop` read the process from now on (called on the loop's thread; the first loop to
        ask keeps it, until it is closed)."""
        if self._loop is loop and not self._stopping:  # the usual case: it reads us already
            return
        self._reclaim_from_closed_loop()
        if self._loop is not None or self._stopping:
            return
        self._loop = loop
        with contextlib.suppress(OSError), self._answer_lock:  # it died: the reader thread goes on
            self._answers.send_bytes(pickle.dumps(("handover",), _PROTOCOL))

    def stop(self) -> None:
        """Ask the process to finalize and exit; terminate it when it does not in time."""
        self._stopping = True
        with contextlib.suppress(OSError), self._send_lock:  # already gone
            self._conn.send_bytes(pickle.dumps(("stop",), _PROTOCOL))
        self._reader.join(_STOP_SECONDS)  # the end, or the handover to a loop
        if self._handed_over and not self._eof:
            # the loop may be stopped by now (server shutdown): read the rest on a thread again
            self._take_back()
            if not self._eof:
                self._reader = self._start_reader()
        if not self._gone.wait(_STOP_SECONDS) and self._process.is_alive():
            _LOG.warning(
                "python model '%s' instance '%s': finalize() did not end in %.0f s; terminating its process",
                self.owner.name,
                self.owner.instance,
                _STOP_SECONDS,
            )
            self._process.terminate()
            self._process.join(5)
            if self._process.is_alive():
                self._process.kill()
        self._gone.wait(10)
        self.close()

    def close(self) -> None:
        self._process.join(5)
        self.ring.close()
        with self._close_lock:  # once: a descriptor closed twice may be someone else's the second time
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._answers.close()

    def _watch_exit(self) -> None:
        """Once the process has exited, its stream ends after what it wrote, even when a process it
        started (a fork, a multiprocessing pool) still holds its end of the pipe open, which would
        keep the reader waiting for an end that never comes, and the requests in flight with it."""
        if self.pid is None:  # never started
            return
        try:
            # ready when the process exits, whoever its parent: not its sentinel, which the zygote's
            # own end (a group's SIGTERM) would set off while the process still serves
            exited = os.pidfd_open(self.pid)
        except ProcessLookupError:  # gone already
            exited = None
        except (AttributeError, OSError):  # no pidfd (Linux before 5.3): the pipe's end alone tells
            return
        if exited is not None:
            try:
                wait([exited])
            finally:
                os.close(exited)
        # a pipe cannot be shut down from this end: what the process wrote before it exited is read
        # first (its natural end follows at once when nobody else holds the pipe), then, should the
        # end not come, the stream ends here
        if self._gone.wait(_EXIT_GRACE_S) or self._closed:
            return
        loop = self._loop
        if self._on_loop and loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: ended from here instead
                loop.call_soon_threadsafe(self._end_on_loop)
                return
        self._eof = True
        self._ended()

    def _end_on_loop(self) -> None:
        if self._eof:
            return
        self._readable_now()
        self._off_loop()
        self._eof = True
        threading.Thread(target=self._ended, name=f"{self.owner.name}_ended", daemon=True).start()

    def _readable_now(self) -> None:
        """What the pipe holds now, handled (non-blocking: the loop's descriptor may be blocking)."""
        fd = self._conn.fileno()
        blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        try:
            with contextlib.suppress(EOFError, OSError):
                self._inbox.extend(self._messages.read())
        finally:
            os.set_blocking(fd, blocking)
        self._handle_inbox()

    def ready(self) -> bool:
        """The model's is_model_ready(), asked in the process; not ready without an answer in time."""
        probe_id, answer = next(self._probe_ids), Future[bool]()
        self._probes[probe_id] = answer
        with contextlib.suppress(OSError), self._answer_lock:
            self._answers.send_bytes(pickle.dumps(("probe", probe_id), _PROTOCOL))
        here = self._on_loop and readiness.runs_loop(self._loop)  # this thread reads the process
        try:
            return readiness.wait(answer, self._read_one if here else None)
        finally:
            self._probes.pop(probe_id, None)

    def _answer(self, call_id: int, error: str | None, value: Any, more: bool = False) -> None:
        self._send_answer(("answer", call_id, error, value, more))

    def _send_answer(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message, _PROTOCOL)
        with contextlib.suppress(OSError), self._answer_lock:  # the process is gone: _ended() follows
            self._answers.send_bytes(data)

    # reading the process -----------------------------------------------------------------------------
    def _read(self) -> None:
        """The reader thread: every message until the end, or until the handover to the loop."""
        inbox = self._inbox
        while self._cause is None:
            if not inbox:
                try:
                    inbox.extend(self._messages.next_messages(PARTIAL_MESSAGE_SECONDS))
                except BrokenStream as exc:
                    self._break(str(exc))
                    break
                except (EOFError, OSError):
                    break
            data = inbox.popleft()
            if hop_frames.kind_of(data):
                self._handle_safely(data)
                continue
            message = self._unpickled(data)
            if message is not None and message[0] == "handover" and self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._read_on_loop)
                except RuntimeError:  # that loop is closed: go on reading here
                    continue
                self._handed_over = True
                return  # what it read past the handover stays in the inbox, for the loop
            if message is not None:
                self._handle_safely(data, message)
        self._eof = True
        self._ended()

    def _read_on_loop(self) -> None:
        if self._eof or self._stopping:  # stop() reads the rest itself
            return
        assert self._loop is not None
        self._handle_inbox()
        if self._cause is not None:
            self._finish_on_loop()
            return
        self._loop.add_reader(self._conn.fileno(), self._readable)
        # uvloop (libuv) makes a polled fd non-blocking: reads wait for data again (a reader callback
        # only reads when there is some, so it never waits)
        os.set_blocking(self._conn.fileno(), True)
        self._on_loop = True
        self._watch_partial()

    def _read_one(self, timeout: float) -> None:
        if self._inbox:
            self._handle_inbox()
            if self._cause is not None:
                self._finish_on_loop()
        elif not self._eof and self._conn.poll(timeout):
            self._readable()

    def _readable(self) -> None:
        """The loop's reader callback: every message the process has written so far."""
        try:
            self._inbox.extend(self._messages.read())
        except BrokenStream as exc:
            self._break(str(exc))
        except (EOFError, OSError):
            self._handle_inbox()
            self._finish_on_loop()
            return
        self._handle_inbox()
        if self._cause is not None:
            self._finish_on_loop()
        elif self._messages.partial:
            self._watch_partial()

    def _finish_on_loop(self) -> None:
        """The loop reads the process no more (its end, or a stream that broke); what waits on it is
        answered by _ended(), on a thread: waiting for the process's exit code must not hold up the
        loop."""
        self._off_loop()
        if self._eof:
            return
        self._eof = True
        threading.Thread(target=self._ended, name=f"{self.owner.name}_ended", daemon=True).start()

    def _watch_partial(self) -> None:
        """Part of a message is read and its rest not: check PARTIAL_MESSAGE_SECONDS later that more
        came (the reader thread waits with that bound itself)."""
        if self._stall_check is None and self._messages.partial and self._loop is not None:
            received = self._messages.received
            self._stall_check = self._loop.call_later(PARTIAL_MESSAGE_SECONDS, self._check_partial, received)

    def _check_partial(self, received: int) -> None:
        self._stall_check = None
        if not self._on_loop or self._eof:
            return
        if self._conn.poll(0):  # bytes waiting: a loop may run its timers before it polls (libuv does)
            self._readable()
            return
        if self._messages.partial and self._messages.received == received:
            self._break(
                f"it stopped in the middle of a message: no more bytes for {PARTIAL_MESSAGE_SECONDS:g} s"
            )
            self._finish_on_loop()
            return
        self._watch_partial()

    def _handle_inbox(self) -> None:
        inbox = self._inbox
        while inbox and self._cause is None:
            self._handle_safely(inbox.popleft())

    def _off_loop(self) -> None:
        if self._stall_check is not None:
            self._stall_check.cancel()
            self._stall_check = None
        if self._on_loop:
            assert self._loop is not None
            self._loop.remove_reader(self._conn.fileno())
            self._on_loop = False

    def _reclaim_from_closed_loop(self) -> None:
        """The loop reading the process is closed (an asyncio.run() that ended, in-process use): read
        on a thread again, so that the next batch is answered and another loop may take over."""
        loop = self._loop
        if loop is None or not loop.is_closed():  # nothing to reclaim (checked again under the lock)
            return
        with self._lock:
            loop = self._loop
            if loop is None or not loop.is_closed() or self._eof or self._stopping:
                return
            # before the handover the reader thread still reads (and keeps reading); after it, none does
            self._loop, self._on_loop, restart, self._handed_over = None, False, self._handed_over, False
        if restart:
            self._reader = self._start_reader()

    def _take_back(self) -> None:
        """Stop the loop reading the process (stop() reads the rest): at once on the loop's own
        thread, when it runs; a stopped loop reads nothing anyway."""
        loop = self._loop
        assert loop is not None
        detached = threading.Event()

        def detach() -> None:
            self._off_loop()
            detached.set()

        try:
            loop.call_soon_threadsafe(detach)
        except RuntimeError:  # closed: it reads nothing
            return
        while not detached.wait(0.05):
            if not loop.is_running():  # it will not run detach(): unregister before the pipe closes
                with contextlib.suppress(Exception):
                    self._off_loop()
                return

    def _handle_safely(self, data: bytes, message: tuple[Any, ...] | None = None) -> None:
        try:
            if hop_frames.kind_of(data):
                self._results(data)
                return
            if message is None:
                message = self._unpickled(data)
            if message is not None:
                self._handle(message)
        except Exception:  # a bug of ours must not stop the instance answering
            _LOG.exception("python model '%s' instance '%s'", self.owner.name, self.owner.instance)

    def _unpickled(self, data: bytes) -> tuple[Any, ...] | None:
        """A control message; None for one that does not unpickle (logged), and for bytes that are not
        a pickle at all, which break the stream."""
        try:
            message: tuple[Any, ...] = pickle.loads(data)
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}"
            if data[:1] != b"\x80":  # neither a frame nor a pickle: garbage on the pipe
                self._break(f"it sent {len(data)} bytes that are neither a frame nor a message ({cause})")
                return None
            # e.g. a class only the model knows, in a log record or a call: a call waits for its answer
            where = f"python model '{self.owner.name}' instance '{self.owner.instance}'"
            call = _call_of(data)
            if call is None:
                _LOG.error("%s: a message from its process does not unpickle: %s", where, cause)
            else:
                text = f"{where}: its call '{call[1]}' does not unpickle in the server ({cause})"
                _LOG.error("%s", text)
                self._answer(call[0], text, None)
            return None
        return message

    def _break(self, cause: str) -> None:
        """What the process sends can no longer be trusted: it is ended (the reader stops, and
        _ended() fails whatever waits on it with `cause`; the instance restarts for later requests)."""
        if self._cause is None:
            self._cause = cause
        with contextlib.suppress(Exception):
            self._process.kill()

    def _results(self, data: bytes) -> None:
        """A DONE or SEND frame: a batch's results, or one response of a sender."""
        owner = self.owner
        try:
            # writable outputs: views of our own copy of the frame
            frame = hop_frames.decode_results(bytearray(data), self.ring.view, owner.name, owner.version)
        except hop_frames.FrameError as exc:
            self._undecodable(data, str(exc))
            return
        finally:
            self.ring.free(hop_frames.ring_end(data))
        if frame.kind == hop_frames.DONE:
            with self._lock:
                batch = self._batches.get(frame.batch_id)
                if batch is not None and len(frame.results) == batch.size:
                    del self._batches[frame.batch_id]
                    for index, result in enumerate(frame.results):
                        if result is not None:  # answered: its sender is closed
                            self._channels.pop((frame.batch_id, index), None)
            if batch is None:
                self._break(f"it answered batch {frame.batch_id}, which it was not running")
            elif len(frame.results) != batch.size:
                self._fail_batch(
                    frame.batch_id,
                    f"it sent {len(frame.results)} results for a batch of {batch.size} requests",
                )
            else:
                batch.done(frame.results)
            return
        key = (frame.batch_id, frame.index)
        with self._lock:
            channel = (self._channels.pop if frame.final else self._channels.get)(key, None)
        if channel is not None:
            channel.send(frame.results[0], frame.final)

    def _undecodable(self, data: bytes, cause: str) -> None:
        """A DONE or SEND frame that does not decode: the requests its head names fail; a head that
        names none breaks the stream."""
        head = hop_frames.results_head(data)
        if head is None:
            self._break(f"it sent a frame that does not decode ({cause})")
            return
        kind, batch_id, index = head
        if kind == hop_frames.DONE:
            if not self._fail_batch(batch_id, f"its results do not decode ({cause})"):
                self._break(
                    f"it sent results that do not decode for batch {batch_id}, which it was not running"
                )
            return
        with self._lock:
            channel = self._channels.pop((batch_id, index), None)
        error = self._frame_error(f"a response it sent does not decode ({cause})")
        _LOG.error("%s", error.message)
        if channel is not None:  # its stream ends here: what the model sends on it later is dropped
            channel.send(error, True)

    def _fail_batch(self, batch_id: int, cause: str) -> bool:
        """Fail every request of the batch (each sender still open ends with the error, its final
        response); False when no such batch runs."""
        with self._lock:
            batch = self._batches.pop(batch_id, None)
            if batch is None:
                return False
            still_open = [self._channels.pop((batch_id, i), None) is not None for i in range(batch.size)]
        error = self._frame_error(cause)
        _LOG.error("%s", error.message)
        batch.done([error if is_open or not batch.senders else None for is_open in still_open])
        return True

    def _frame_error(self, cause: str) -> TritonError:
        return TritonError(
            ErrorCode.INTERNAL, f"python model '{self.owner.name}' instance '{self.owner.instance}': {cause}"
        )

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "call":
            self._call(*message[1:])
        elif kind == "metrics":
            self.metrics.apply(message[1])
        elif kind == "log":
            record: logging.LogRecord = message[1]
            logging.getLogger(record.name).handle(record)
        elif kind == "started":
            self._started.set()
        elif kind == "ready":
            self.has_readiness = message[2]
            self._ready.set_result(message[1])
        elif kind == "probed":
            probe = self._probes.pop(message[1], None)
            if probe is not None:
                probe.set_result(message[2])
        elif kind == "bls_cancel":
            stream = self._bls_streams.get(message[1])
            if stream is not None:
                stream.cancel()
        elif kind == "broken":  # the process found the server's stream broken: it ends itself
            if message[2] != "?":  # the batch it ran ("?": one it could not read, the first)
                self._running = message[2]  # the batches behind it never started: they run again
            self._break(message[1])

    def _call(self, call_id: int, kind: str, payload: Any) -> None:
        if kind == "grow":
            try:
                self._answer(call_id, None, self.ring.grow(payload))
            except TritonError as exc:  # no room in /dev/shm: the message that needed it fails
                self._answer(call_id, exc.message, None)
            except Exception as exc:  # anything else: still answered, so the writer never waits forever
                cause = f"{type(exc).__name__}: {exc}"
                text = f"Failed to increase the shared memory pool size to hold {payload} bytes ({cause})"
                self._answer(call_id, text, None)
        elif kind == "bls":  # it waits on another model: off the reader thread
            threading.Thread(target=self._bls, args=(call_id, *payload), daemon=True).start()
        elif kind == "model_control":  # a load waits on the repository: off the reader thread too
            threading.Thread(target=self._model_control, args=(call_id, *payload), daemon=True).start()
        elif kind == "metrics":  # quick: answered here, in order with the process's batched updates
            try:
                self._answer(call_id, None, self.metrics.call(payload))
            except Exception as exc:
                self._answer(call_id, str(exc) or type(exc).__name__, None)
        else:
            self._answer(call_id, f"unknown call '{kind}'", None)

    def _model_control(self, call_id: int, action: str, args: tuple[Any, ...]) -> None:
        """The process's pb_utils.load_model / unload_model / is_model_ready, run by this server's hook."""
        manager = pb_model_control.current_model_manager()
        try:
            if manager is None:
                raise TritonError(ErrorCode.UNAVAILABLE, "the server is stopping")
            ready: bool | None = None
            if action == "load":
                manager.load_model(*args)
            elif action == "unload":
                manager.unload_model(*args)
            else:
                ready = manager.is_model_ready(*args)
            self._answer(call_id, None, ready)
        except TritonError as exc:
            self._answer(call_id, exc.message, None)
        except Exception as exc:
            self._answer(call_id, str(exc) or type(exc).__name__, None)

    def _bls(self, call_id: int, request: pb_utils.InferenceRequest, decoupled: bool) -> None:
        """Run a BLS request of the model through this server's BLS hook, as in-thread models do."""
        scope = self.owner._scope
        try:
            with pb_scope.model_scope(scope):
                result = request.exec(decoupled)
                if not isinstance(result, pb_utils.ResponseIterator):
                    self._answer(call_id, None, result)
                    return
                self._bls_streams[call_id] = result
                for response in result:
                    self._answer(call_id, None, response, more=True)
            self._answer(call_id, None, None)
        except Exception as exc:
            self._answer(call_id, str(exc) or type(exc).__name__, None)
        finally:
            self._bls_streams.pop(call_id, None)

    def _died(self) -> TritonError:
        code = self._process.exitcode
        if self._stopping:
            return TritonError(
                ErrorCode.UNAVAILABLE,
                f"python model '{self.owner.name}' instance '{self.owner.instance}' was unloaded before "
                "the response completed",
            )
        if self._cause is not None:
            return self._frame_error(
                f"{self._cause}; its process was ended and the instance restarts for later requests"
            )
        return TritonError(
            ErrorCode.INTERNAL,
            f"python model '{self.owner.name}' instance '{self.owner.instance}': its process exited "
            f"unexpectedly ({exit_text(code)}); the instance restarts for later requests",
        )

    def _ended(self) -> None:
        """The process is gone, or no longer heard: whatever waits on it gets an error (once: the
        reader and the exit watcher may both get here)."""
        with self._lock:
            if self._ending:
                return
            self._ending = True
        if process_life.ending():  # the server ends and killed it: no crash to report
            self._stopping = True
        self._process.join(5)
        if self._process.is_alive() and not self._stopping:  # it can no longer answer anything
            self._break("its pipe to the server closed while it still ran")
            self._process.join(5)
        self._started.set()
        with self._lock:
            self.dead = True
            batches, self._batches = self._batches, {}
            channels, self._channels = self._channels, {}
        error = self._died()
        if not self._ready.done():
            self._ready.set_result(
                f"python model '{self.owner.name}' instance '{self.owner.instance}': its process exited "
                f"while starting ({exit_text(self._process.exitcode)})"
            )
        try:
            if self._ready.result() is not None:  # it never served: the load reports why
                return
            if not self._stopping:
                _LOG.warning("%s", error.message)
                self.owner.died(self._process.exitcode)
            for position, (batch_id, batch) in enumerate(batches.items()):
                still_open = [
                    channels.pop((batch_id, index), None) is not None for index in range(batch.size)
                ]
                running = position == 0 if self._running == _FIRST_IN_FLIGHT else batch_id == self._running
                if not running and not self._stopping:
                    # the process runs its batches in order: the first was running (unless it said
                    # which), the ones behind it never started and may run elsewhere
                    batch.done([NotStarted(self.owner.name, self.owner.instance)] * batch.size)
                else:
                    batch.done([error if is_open or not batch.senders else None for is_open in still_open])
            for channel in channels.values():  # responses still streaming from an earlier batch
                channel.send(error, True)
        finally:
            self.metrics.close()
            self._gone.set()
