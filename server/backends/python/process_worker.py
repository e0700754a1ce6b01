"""The instance process of a python model (see `process_host`): hosts one `PythonModel` and serves the
server's pipes.

The main thread imports the model, runs initialize(), then reads its batches from the server's pipe
and runs execute() on each itself (no hand-off to another thread on the way: each costs a GIL
switch), and finalize() at the end. Answers to what the model asks of the server come over a second
pipe, read by a helper thread, so a model thread waiting on the server (its execute() included)
never waits on the batch pipe. Every response the model sends goes back as soon as it is sent, its
tensors through the output ring.

What the model asks of the server goes as a call and waits for the answer: a BLS request (run by the
server's BLS hook, a decoupled one answering as a stream), a model load or unload, and a larger
output ring. Log records (pb_utils.Logger and Python logging) are re-emitted by the server. Custom
metrics (pb_utils.MetricFamily) are forwarded to the server's registry (`metric_forwarding`): their
batched updates go out ahead of the next message, so ahead of the response they were made for. The
answer pipe also brings the news that a request's client went away: a request still waiting here is
answered CANCELLED instead of run, and a running one reports is_cancelled() from then on.

Every batch is answered: one that does not decode fails its requests, results that cannot be
encoded become errors, and when even that fails, or the server's stream is past reading, the
process says why ("broken") and ends, which the server answers for.

Imports only what hosting the model needs (no server, no protobuf): start-up stays short.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import logging.handlers
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

from server.backends.base import tcli_bug
from server.backends.python import fork_signals, hop_frames
from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.host import HostSpec, PythonModel
from server.backends.python.metric_forwarding import ForwardingRegistry
from server.backends.python.pb_utils import metric_registry as pb_metric_registry
from server.backends.python.pb_utils import model_control as pb_model_control
from server.backends.python.pb_utils import requests as pb_requests
from server.backends.python.pb_utils import scope as pb_scope
from server.backends.python.pipe_reader import BrokenStream, MessageReader, PipePair, write_message
from server.backends.python.shm import ArenaView, RingWriter
from server.protocol.errors import ErrorCode, TritonError, client_cancelled
from server.protocol.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_LOG = logging.getLogger("tcli.python_process")


_CANCELLED_KEPT = 4096  # cancellations remembered for requests no sender is left to report them


def main(
    conn: PipePair,
    answers: Connection,
    spec: HostSpec,
    ring_name: str,
    log_levels: dict[str, int],
    server_state: tuple[dict[str, str], str] | None,
) -> None:
    """The process entry point (a `multiprocessing` target): `conn` carries batches in and everything
    the process says out; `answers` carries the server's answers to its calls. `server_state` is the
    server's environment and working directory when it started this process (the zygote's are
    older)."""
    if server_state is not None:  # forked from the zygote
        gc.freeze()  # its modules are never scanned here: their pages stay shared with the zygote's
        environ, cwd = server_state
        os.environ.clear()
        os.environ.update(environ)
        with contextlib.suppress(OSError):  # removed since: the zygote's stays
            os.chdir(cwd)
    # Ctrl-C, `kill -- -<pgid>` and systemd's stop signal the whole group: the server drains its
    # requests, then stops us itself (a pipe that closes, the server gone, ends us too)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # the interpreter state of Triton's stub: its sys.argv is [""]. A spawned process inherits the
    # server's (`tcli serve --model-repository=...`), which a model's `unittest.main("model",
    # exit=False)` parses and rejects ("unrecognized arguments"), ending the process with code 2
    sys.argv = [""]
    # a model may start processes of its own (a multiprocessing.Pool), as in Triton's stub: the
    # daemon flag the server starts us with (never waited for at its exit) forbids that here, and
    # they start as the stub's do, forked from this process (with the model's module), not from
    # the zygote, whose start method the process inherited; with signals of their own (fork_signals)
    multiprocessing.current_process().daemon = False
    multiprocessing.set_start_method("fork", force=True)
    fork_signals.install()
    _Worker(conn, answers, spec, ring_name, log_levels).run()


class _Call:
    """A call to the server waiting for its answer(s)."""

    __slots__ = ("answers",)

    def __init__(self) -> None:
        self.answers: queue.SimpleQueue[tuple[str | None, Any, bool]] = queue.SimpleQueue()


class _Worker:
    def __init__(
        self,
        conn: PipePair,
        answers: Connection,
        spec: HostSpec,
        ring_name: str,
        log_levels: dict[str, int],
    ) -> None:
        self._conn = conn
        self._answers = answers
        self._spec = spec
        # one lock orders every message out, and the ring space they take (RLock: a message that
        # needs a larger ring asks for it while holding the lock)
        self._lock = threading.RLock()
        # the server asked us to echo "handover" (it then reads us on its event loop): sent by whoever
        # holds the lock next, never waited for by the answers thread, which must stay free to
        # deliver the answer a lock holder may be waiting for (a larger ring)
        self._handover = False
        self._calls: dict[int, _Call] = {}
        # (batch id, request index) of requests whose clients went away, as the server says. An entry
        # goes when its response sender sends the final flag (a decoupled model's thread may send
        # long after execute() returned); news that came too late for any sender is dropped once
        # the set grows large, oldest batches first
        self.cancelled: set[tuple[int, int]] = set()
        self._cancel_lock = threading.Lock()  # the answers thread adds, model threads remove
        self._model: PythonModel | None = None  # once initialize() has returned
        self._running: int | None = None  # the batch execute() runs, if any (told when giving up)
        self._call_ids = itertools.count(1)
        self._arena = ArenaView()
        self._ring = RingWriter(ring_name, self._grow_ring)
        self._install_logging(log_levels)
        pb_requests.set_bls_executor(self._bls)
        pb_model_control.set_model_manager(_ForwardedModelControl(self))
        pb_scope.set_default_model_scope(pb_scope.ModelScope(spec.name, spec.version, spec.version_dir))
        self._metrics = ForwardingRegistry(
            lambda payload: self.call("metrics", payload),
            self._flush_metrics,
            spec.initialize_args.get("model_instance_name", ""),
        )
        pb_metric_registry.set_registry(self._metrics)

    # the pipe ----------------------------------------------------------------------------------------
    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._send_locked(pickle.dumps(message, _PROTOCOL))

    def _send_locked(self, data: bytes) -> None:
        self._send_handover()
        self._send_metrics_locked()
        write_message(self._conn.write_fileno(), data)

    def _send_metrics_locked(self) -> None:
        """The custom metrics' batched updates, if any, ahead of whatever goes next."""
        batch = self._metrics.take()
        if batch is not None:
            self._conn.send_bytes(pickle.dumps(("metrics", batch), _PROTOCOL))

    def _flush_metrics(self) -> None:
        with self._lock:
            self._send_handover()
            self._send_metrics_locked()

    def _send_handover(self) -> None:
        """The "handover" echo, if one is owed (the caller holds the lock)."""
        if self._handover:
            self._handover = False
            self._conn.send_bytes(pickle.dumps(("handover",), _PROTOCOL))

    def call(self, kind: str, payload: Any) -> Any:
        """Ask the server and wait for its answer; its error becomes a TritonModelException."""
        call_id, call = self._start_call(kind, payload)
        try:
            error, value, _ = call.answers.get()
        finally:
            self._calls.pop(call_id, None)
        if error is not None:
            raise pb_utils.TritonModelException(error)
        return value

    def _grow_ring(self, needed: int) -> str:
        try:
            name: str = self.call("grow", needed)
        except pb_utils.TritonModelException as exc:  # the server's words (no room in /dev/shm)
            raise TritonError(ErrorCode.INTERNAL, exc.message()) from None
        return name

    def _start_call(self, kind: str, payload: Any) -> tuple[int, _Call]:
        call_id, call = next(self._call_ids), _Call()
        self._calls[call_id] = call
        self.send(("call", call_id, kind, payload))
        return call_id, call

    def run(self) -> None:
        self.send(("started",))  # up: the model's own start (initialize()) has no time limit
        threading.Thread(target=self._read_answers, name="answers", daemon=True).start()
        try:
            model = PythonModel(self._spec)
        except TritonError as error:
            self.send(("ready", error.message, False))
            _exit()
        except BaseException as exc:  # our own bug: still say why
            self.send(("ready", f"{type(exc).__name__}: {exc}", False))
            _exit()
        self._model = model
        # what the zygote imported and the model built at initialize() lives as long as the process:
        # the collector never scans it again (a full collection over numpy's and the model's objects
        # took a third of an instance's CPU under steady load) and its pages stay shared
        gc.freeze()
        self.send(("ready", None, model.has_readiness))
        messages = MessageReader(self._conn.fileno())
        stopping = False
        while not stopping:
            try:
                arrived = messages.next_messages()  # under load, several batches at once
            except BrokenStream as exc:
                self._give_up(f"its pipe from the server broke ({exc})", "?")
            except (EOFError, OSError):  # the server is gone: nothing left to answer to
                os._exit(0)
            for data in arrived:
                if hop_frames.kind_of(data) == hop_frames.EXEC:
                    self._execute(model, bytearray(data))  # writable: the inputs are views of it
                elif self._control(data) == "stop":
                    stopping = True
                    break
        with contextlib.suppress(Exception):
            model.unload()
        self._arena.close()
        with self._lock:
            self._ring.close()
            self._send_locked(pickle.dumps(("stopped",), _PROTOCOL))
        _exit()

    def _control(self, data: bytes) -> str:
        try:
            kind: str = pickle.loads(data)[0]
        except Exception as exc:
            self._give_up(f"a message from the server does not unpickle ({type(exc).__name__}: {exc})", None)
        return kind

    def _give_up(self, cause: str, running: int | str | None) -> NoReturn:
        """The server's stream cannot be trusted: say why and which batch ran (the server fails it, and
        hands the ones behind it to the restarted instance) and end. `running`: the batch's id, None
        for none, "?" for one that could not be read."""
        # the lock's holder may wait for an answer only the answers thread (perhaps the caller) brings
        if self._lock.acquire(timeout=5):
            with contextlib.suppress(Exception):
                self._send_locked(pickle.dumps(("broken", cause, running), _PROTOCOL))
        _exit()

    def _read_answers(self) -> None:
        while True:
            data = _receive(self._answers)
            try:
                message: tuple[Any, ...] = pickle.loads(data)
            except Exception as exc:  # the call waiting for it would wait forever
                cause = f"an answer from the server does not unpickle ({type(exc).__name__}: {exc})"
                for waiting in list(self._calls.values()):  # it was one of theirs: each fails, and
                    waiting.answers.put((cause, None, False))  # lets go of the lock _give_up() takes
                self._give_up(cause, self._running)
            if message[0] == "answer":
                call = self._calls.get(message[1])
                if call is not None:
                    call.answers.put(message[2:])
            elif message[0] == "cancel":
                with self._cancel_lock:
                    self.cancelled.add((message[1], message[2]))
            elif message[0] == "probe":  # is_model_ready(), off this thread (it may take long)
                threading.Thread(target=self._probe, args=(message[1],), daemon=True).start()
            elif message[0] == "handover":  # the server reads us elsewhere from this message on
                self._handover = True
                if self._lock.acquire(blocking=False):  # else the holder sends it with its message
                    try:
                        self._send_handover()
                    finally:
                        self._lock.release()

    def _probe(self, probe_id: int) -> None:
        model = self._model
        self.send(("probed", probe_id, model is not None and model.ready()))

    # the model ---------------------------------------------------------------------------------------
    def _execute(self, model: PythonModel, frame: bytearray) -> None:
        try:
            batch = hop_frames.decode_exec(frame, self._arena.view)
        except hop_frames.FrameError as exc:
            self._undecodable(frame, str(exc))
            return
        batch_id, count = batch.batch_id, len(batch.requests)
        # requests whose clients left while they waited here are answered, not run
        cancelled = self.cancelled
        waiting = [i for i in range(count) if (batch_id, i) not in cancelled] if cancelled else range(count)
        results: list[InferenceResponse | TritonError | None] = (
            [None] * count if len(waiting) == count else [client_cancelled()] * count
        )
        self._running = batch_id
        try:
            if waiting:
                name, version = self._spec.name, self._spec.version
                requests = [
                    InferenceRequest(name, version, r.id, r.inputs, r.outputs, r.parameters)
                    for r in (batch.requests[i] for i in waiting)
                ]
                channels = [_Channel(self, batch_id, i) for i in waiting] if batch.senders else None
                for index, result in zip(waiting, model.execute_channels(requests, channels), strict=True):
                    results[index] = result
        except Exception as exc:  # a bug of ours: the batch fails, the instance goes on
            self._log_bug("running", [r.id for r in batch.requests])
            error = tcli_bug(exc)
            results = [error] * count
        if len(cancelled) > _CANCELLED_KEPT:
            with self._cancel_lock:
                self.cancelled -= {key for key in self.cancelled if key[0] < batch_id - _CANCELLED_KEPT}
        self.send_results(hop_frames.DONE, batch_id, 0, False, results)
        self._running = None

    def _undecodable(self, frame: bytearray, cause: str) -> None:
        """A batch that does not decode (a bug of ours): its requests fail, as its head counts them;
        a head that cannot be read leaves nothing to answer to but the whole stream."""
        head = hop_frames.exec_head(frame)
        if head is None:
            self._give_up(f"a batch it was sent does not decode ({cause})", "?")
        batch_id, count = head
        error = TritonError(
            ErrorCode.INTERNAL, f"{self._named()}: a batch it was sent does not decode ({cause})"
        )
        _LOG.error("%s", error.message)
        self.send_results(hop_frames.DONE, batch_id, 0, False, [error] * count)

    def _named(self) -> str:
        spec = self._spec
        return f"python model '{spec.name}' instance '{spec.initialize_args.get('model_instance_name', '')}'"

    def sender_closed(self, batch_id: int, index: int) -> None:
        """A request's response sender sent its final flag: its cancellation is no longer news."""
        with self._cancel_lock:
            self.cancelled.discard((batch_id, index))

    def send_results(
        self,
        kind: int,
        batch_id: int,
        index: int,
        final: bool,
        results: list[InferenceResponse | TritonError | None],
    ) -> None:
        """One DONE or SEND frame with `results`, their large tensors in the ring (in message order)."""
        with self._lock:
            try:
                frame = hop_frames.encode_results(kind, batch_id, index, final, results, self._ring)
            except TritonError as refused:  # e.g. the output ring could not grow: these requests fail
                error = TritonError(refused.code, f"{self._named()}: {refused.message}")
                _LOG.error("%s", error.message)
                failed = [None if r is None else error for r in results]
                frame = hop_frames.encode_results(kind, batch_id, index, final, failed, hop_frames.INLINE)
            except Exception as exc:  # e.g. an output numpy cannot copy: these requests fail
                frame = self._failed_frame(kind, batch_id, index, final, results, exc)
            self._send_locked(frame)

    def _failed_frame(
        self,
        kind: int,
        batch_id: int,
        index: int,
        final: bool,
        results: list[InferenceResponse | TritonError | None],
        exc: Exception,
    ) -> bytes:
        """The frame failing `results`, which did not encode: errors only, in the frame. Should even
        that fail, the process ends, and the server fails what it ran (never a silent drop, which
        would leave the requests waiting)."""
        # the server's refusal (a larger ring it could not make) is its own answer; anything else is ours
        refused = isinstance(exc, pb_utils.TritonModelException)
        message = f"{self._named()}: {str(exc) if refused else tcli_bug(exc).message}"
        if refused:
            _LOG.error("%s", message)
        else:
            self._log_bug(
                "sending the results of", [r.id for r in results if isinstance(r, InferenceResponse)]
            )
        for text in (message, "internal error: a bug in tcli: a response could not be sent"):
            failed = [None if r is None else TritonError(ErrorCode.INTERNAL, text) for r in results]
            try:
                return hop_frames.encode_results(kind, batch_id, index, final, failed, hop_frames.INLINE)
            except Exception:
                _LOG.exception("%s: the error frame failed too", self._named())
        cause = f"results it could not encode, nor their errors ({type(exc).__name__}: {exc})"
        self._give_up(cause, self._running)

    def _log_bug(self, doing: str, request_ids: list[str]) -> None:
        """The traceback of the exception being handled, to the server's log (through the pipe)."""
        spec = self._spec
        _LOG.exception(
            "tcli bug %s a batch of python model '%s' version %s instance '%s', request(s) %s",
            doing,
            spec.name,
            spec.version,
            spec.initialize_args.get("model_instance_name", ""),
            ", ".join(repr(i) for i in request_ids) or "(no ids)",
        )

    # BLS ---------------------------------------------------------------------------------------------
    def _bls(
        self, request: pb_utils.InferenceRequest, model_name: str, model_version: int, decoupled: bool
    ) -> pb_utils.InferenceResponse | pb_utils.ResponseIterator:
        """InferenceRequest.exec() in this process: the server runs it through its own BLS hook."""
        if not decoupled:
            response: pb_utils.InferenceResponse = self.call("bls", (request, False))
            return response
        call_id, call = self._start_call("bls", (request, True))

        def responses() -> Any:
            try:
                while True:
                    error, value, more = call.answers.get()
                    if error is not None:
                        raise pb_utils.TritonModelException(error)
                    if value is not None:
                        yield value
                    if not more:
                        return
            finally:
                self._calls.pop(call_id, None)

        return pb_utils.ResponseIterator(responses(), lambda: self.send(("bls_cancel", call_id)))

    # logging -----------------------------------------------------------------------------------------
    def _install_logging(self, levels: dict[str, int]) -> None:
        handler = logging.handlers.QueueHandler(_PipeQueue(self))  # type: ignore[arg-type]
        root = logging.getLogger()
        root.handlers[:] = [handler]
        for name, level in levels.items():
            logging.getLogger(name or None).setLevel(level)


class _PipeQueue:
    """What QueueHandler puts its prepared (picklable) records into: the pipe."""

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker

    def put_nowait(self, record: logging.LogRecord) -> None:
        self._worker.send(("log", record))


class _Channel:
    """A request's response channel, whose other end is the server's channel for that request."""

    __slots__ = ("_batch", "_index", "_worker")

    def __init__(self, worker: _Worker, batch: int, index: int) -> None:
        self._worker = worker
        self._batch = batch
        self._index = index

    def send(self, result: InferenceResponse | TritonError | None, final: bool, /) -> None:
        self._worker.send_results(hop_frames.SEND, self._batch, self._index, final, [result])
        if final and self._worker.cancelled:
            self._worker.sender_closed(self._batch, self._index)

    def is_cancelled(self) -> bool:
        return (self._batch, self._index) in self._worker.cancelled


def _receive(conn: Connection) -> bytes:
    try:
        return conn.recv_bytes()
    except (EOFError, OSError):  # the server is gone: nothing left to answer to
        os._exit(0)


def _exit() -> NoReturn:
    """Leave now: threads the model started must not keep the process alive."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


class _ForwardedModelControl(pb_model_control.ModelManager):
    """pb_utils.load_model, unload_model and is_model_ready in an instance process: the server runs
    them, as it runs the process's BLS requests."""

    def __init__(self, worker: _Worker) -> None:
        self._worker = worker

    def load_model(self, model_name: str, config: str, files: dict[str, bytes], /) -> None:
        self._worker.call("model_control", ("load", (model_name, config, files)))

    def unload_model(self, model_name: str, unload_dependents: bool, /) -> None:
        self._worker.call("model_control", ("unload", (model_name, unload_dependents)))

    def is_model_ready(self, model_name: str, model_version: int, /) -> bool:
        return bool(self._worker.call("model_control", ("ready", (model_name, model_version))))
