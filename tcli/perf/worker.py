"""The load generator: one process with an asyncio loop that sends pre-encoded requests and records,
per request, when it started and when its response was complete.

It is kept lean on purpose, because it must never be the bottleneck: requests are encoded once by
the parent (tcli/perf/encode.py); HTTP goes over raw HTTP/1.1 keep-alive connections driven by an
asyncio Protocol (no HTTP library, no response decoding beyond the status line and the length),
under uvloop when it is installed; gRPC goes through grpc.aio with identity serializers, so that
serialized ModelInferRequest bytes go out and response bytes come back untouched. This module and
the ones it imports (load_spec.py, http1_client.py, h2_client.py and the server's HTTP/2 layer
server/protocol/http2, grpc_messages.py) use only the standard library (and grpc for gRPC): starting
a worker process is cheap.

The parent (tcli/perf/profiler.py) starts workers with `python -m tcli.perf.worker FD` and talks to
each over a multiprocessing Connection on that file descriptor:

    parent -> worker   ("concurrency", n)            keep n requests in flight (closed loop)
                       ("rate", per_second, poisson)  send on a schedule (open loop)
                       ("collect",)                   answer with the records since the last collect
                       ("stop",)                      finish in-flight requests, answer, and exit
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from array import array
from multiprocessing.connection import Connection
from typing import Any

from tcli.errors import describe
from tcli.perf.grpc_messages import grpc_error, grpc_sequence_parameters
from tcli.perf.h2_client import H2Connection, grpc_header_block
from tcli.perf.http1_client import HttpConnection, http_error
from tcli.perf.load_spec import LoadSpec, RequestFailed, now_ns

# gRPC clients per HTTP/2 connection: perf_analyzer's C++ client shares one channel among at most
# this many clients, its own statistics client being the first (measured with `ss`: 2 connections
# at concurrency 6-8, 3 at 13), so slot i rides connection (i + 1) // 6; the same variable changes it
_SHARE = os.environ.get("TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT", "6")
GRPC_SLOTS_PER_CONNECTION = max(1, int(_SHARE)) if _SHARE.strip().isdigit() else 6
UNARY_PATH = "/inference.GRPCInferenceService/ModelInfer"
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"


# --- sequences ---------------------------------------------------------------------------------------
class SequenceState:
    """One live sequence: its id, its data stream, and how many requests remain."""

    __slots__ = ("id", "remaining", "step", "stream")

    def __init__(self) -> None:
        self.id = 0
        self.remaining = 0
        self.stream: list[Any] = []
        self.step = 0


# --- the worker ------------------------------------------------------------------------------------
class Worker:
    def __init__(self, spec: LoadSpec, conn: Connection) -> None:
        self.spec = spec
        self.conn = conn
        self.loop = asyncio.get_event_loop()
        self.rng = random.Random(spec.seed)
        # records since the last collect
        self.starts = array("q")
        self.ends = array("q")
        self.sequence_ends = array("b")
        self.send_ns = 0
        self.receive_ns = 0
        self.request_ns = 0
        self.completed = 0
        self.sent = 0
        self.delayed = 0
        self.errors = 0
        self.first_error = ""
        # load
        self.target = 0  # concurrency: the number of slots that should run
        self.slots: list[asyncio.Task[None]] = []
        self.rate_task: asyncio.Task[None] | None = None
        self.inflight: set[asyncio.Task[None]] = set()
        self.next_request = 0
        self.next_stream = 0
        self.next_sequence = 0
        self.idle_http: list[HttpConnection] = []
        self.stopped = asyncio.Event()
        self.grpc_channel: Any = None
        self.grpc_unary: Any = None
        self.grpc_stream: Any = None
        self.rate_sequences: list[SequenceState] = []
        self.rate_locks: list[asyncio.Lock] = []
        self.h2: dict[int, H2Connection] = {}  # by connection group, see GRPC_SLOTS_PER_CONNECTION
        self.h2_connecting: dict[int, asyncio.Task[Any]] = {}
        # TLS contexts once per process (the parent checked the files: tcli/perf/prepare.py)
        tls = spec.tls
        self.http_ssl = tls.https_context() if tls is not None and spec.https else None
        self.grpc_ssl = tls.grpc_context() if tls is not None else None
        authority = f"{spec.host}:{spec.port}"
        self.unary_block = grpc_header_block(UNARY_PATH, authority, spec.grpc_metadata)
        self.stream_block = grpc_header_block(STREAM_PATH, authority, spec.grpc_metadata)

    # commands -------------------------------------------------------------------------------------
    def on_command(self) -> None:
        try:
            command = self.conn.recv()
        except (EOFError, OSError):
            self.stopped.set()  # the parent is gone
            return
        kind = command[0]
        if kind == "concurrency":
            self._set_concurrency(int(command[1]))
        elif kind == "rate":
            self._set_rate(float(command[1]), bool(command[2]))
        elif kind == "collect":
            self.conn.send(self._take_records())
        elif kind == "stop":
            self.loop.create_task(self._stop())

    def _take_records(self) -> dict[str, Any]:
        records = {
            "starts": self.starts.tobytes(),
            "ends": self.ends.tobytes(),
            "sequence_ends": self.sequence_ends.tobytes(),
            "send_ns": self.send_ns,
            "receive_ns": self.receive_ns,
            "request_ns": self.request_ns,
            "completed": self.completed,
            "sent": self.sent,
            "delayed": self.delayed,
            "errors": self.errors,
            "first_error": self.first_error,
            "cpu_ns": time.process_time_ns(),
            "at_ns": now_ns(),
        }
        self.starts = array("q")
        self.ends = array("q")
        self.sequence_ends = array("b")
        self.send_ns = self.receive_ns = self.request_ns = self.completed = 0
        self.sent = self.delayed = 0
        return records

    async def _stop(self) -> None:
        self.target = 0
        if self.rate_task is not None:
            self.rate_task.cancel()
        pending = [t for t in self.slots if not t.done()] + list(self.inflight)
        try:
            if pending:
                await asyncio.wait(pending, timeout=self.spec.timeout_s)
            self.conn.send(self._take_records())
        except OSError:
            pass  # the parent is gone already
        finally:
            self.stopped.set()

    def _record(self, start: int, end: int, send: int, receive: int, sequence_end: bool) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.sequence_ends.append(1 if sequence_end else 0)
        self.send_ns += send
        self.receive_ns += receive
        self.request_ns += end - start
        self.completed += 1

    def _error(self, message: str) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = message

    # requests -----------------------------------------------------------------------------------
    def _plain_request(self) -> bytes:
        requests = self.spec.requests
        message = requests[self.next_request % len(requests)]
        self.next_request += 1
        return message

    def _new_sequence(self, state: SequenceState) -> None:
        spec = self.spec
        index = self.next_sequence
        self.next_sequence += 1
        sequence_id = spec.sequence_id_start + spec.sequence_id_offset + index * spec.sequence_id_stride
        if spec.sequence_id_end:
            span = spec.sequence_id_end - spec.sequence_id_start
            sequence_id = spec.sequence_id_start + (sequence_id - spec.sequence_id_start) % span
        state.id = sequence_id
        state.stream = spec.sequence_streams[self.next_stream % len(spec.sequence_streams)]
        self.next_stream += 1
        state.step = 0
        if spec.sequence_length_from_data:
            state.remaining = len(state.stream)
        else:
            spread = spec.sequence_length * spec.sequence_length_variation / 100.0
            low = max(1, round(spec.sequence_length - spread))
            high = max(low, round(spec.sequence_length + spread))
            state.remaining = self.rng.randint(low, high)

    def _sequence_request(self, state: SequenceState) -> tuple[bytes, bool]:
        if state.remaining <= 0:
            self._new_sequence(state)
        parts = state.stream[state.step % len(state.stream)]
        start = state.step == 0
        state.step += 1
        state.remaining -= 1
        end = state.remaining == 0
        if self.spec.protocol == "grpc":
            return parts + grpc_sequence_parameters(state.id, start, end), end
        tail = (
            f',"sequence_id":{state.id},"sequence_start":{"true" if start else "false"},'
            f'"sequence_end":{"true" if end else "false"}}}}}'
        ).encode()
        return self._http_message(parts.header_open + tail, parts.blob), end

    def _http_message(self, header: bytes, blob: bytes) -> bytes:
        lines = [f"POST {self.spec.http_path} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self.spec.http_headers]
        lines.append(f"Inference-Header-Content-Length: {len(header)}")
        lines.append(f"Content-Length: {len(header) + len(blob)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + header + blob

    # transports -----------------------------------------------------------------------------------
    async def _http_connect(self) -> HttpConnection:
        _, protocol = await self.loop.create_connection(
            lambda: HttpConnection(self.loop), self.spec.host, self.spec.port, ssl=self.http_ssl
        )
        return protocol

    def _open_grpcio(self) -> None:
        import grpc

        options = [
            ("grpc.max_send_message_length", 2**31 - 1),
            ("grpc.max_receive_message_length", 2**31 - 1),
        ]
        target = f"{self.spec.host}:{self.spec.port}"
        credentials = None if self.spec.tls is None else self.spec.tls.grpc_credentials()
        if credentials is None:
            self.grpc_channel = grpc.aio.insecure_channel(target, options=options)
        else:
            self.grpc_channel = grpc.aio.secure_channel(target, credentials, options=options)
        self.grpc_unary = self.grpc_channel.unary_unary(UNARY_PATH)
        self.grpc_stream = self.grpc_channel.stream_stream(STREAM_PATH)

    async def _h2(self, group: int = 0) -> H2Connection:
        """The HTTP/2 connection of a group of slots, (re)connected on first use."""
        connection = self.h2.get(group)
        if connection is None or not connection.usable():
            connecting = self.h2_connecting.get(group)
            if connecting is None:
                connecting = self.h2_connecting[group] = self.loop.create_task(
                    self.loop.create_connection(
                        lambda: H2Connection(self.loop), self.spec.host, self.spec.port, ssl=self.grpc_ssl
                    )
                )
            try:
                _, connection = await connecting
                self.h2[group] = connection
            finally:
                self.h2_connecting.pop(group, None)
        return connection

    async def _http_exchange(self, connection: HttpConnection, message: bytes) -> tuple[int, int, int, int]:
        """(start, end, send_ns, receive_ns) of one request; raises RequestFailed."""
        start = now_ns()
        waiter = connection.send(message)
        sent = now_ns()
        status, first, end, body = await asyncio.wait_for(waiter, self.spec.timeout_s)
        if status != 200:
            raise RequestFailed(http_error(status, body))
        return start, end, sent - start, end - first

    async def _grpc_exchange(self, message: bytes, group: int = 0) -> tuple[int, int, int, int]:
        if self.spec.grpc_client == "grpcio":
            import grpc

            start = now_ns()
            try:
                await self.grpc_unary(
                    message, timeout=self.spec.timeout_s, metadata=self.spec.grpc_metadata or None
                )
            except grpc.aio.AioRpcError as exc:
                raise RequestFailed(exc.details() or exc.code().name) from None
            return start, now_ns(), 0, 0
        connection = await self._h2(group)
        start = now_ns()
        waiter = connection.unary(self.unary_block, message)
        sent = now_ns()
        _first, end, answered = await asyncio.wait_for(waiter, self.spec.timeout_s)
        if not answered:
            raise RequestFailed(await self._grpc_error_text(message))
        return start, end, sent - start, 0

    async def _grpc_error_text(self, message: bytes) -> str:
        """The server's error for a call that came back without a message: asked once via grpcio."""
        spec = self.spec

        def call() -> str:
            import grpc

            target = f"{spec.host}:{spec.port}"
            credentials = None if spec.tls is None else spec.tls.grpc_credentials()
            channel = (
                grpc.insecure_channel(target)
                if credentials is None
                else grpc.secure_channel(target, credentials)
            )
            with channel:
                try:
                    channel.unary_unary(UNARY_PATH)(
                        message, timeout=spec.timeout_s, metadata=spec.grpc_metadata or None
                    )
                except grpc.RpcError as exc:
                    return str(exc.details() or exc.code().name)
            return "the server answered the call without a response message"

        return await self.loop.run_in_executor(None, call)

    async def _stream_exchange(
        self, stream: Any, message: bytes, connection: H2Connection | None
    ) -> tuple[int, int, int, int]:
        start = now_ns()
        if self.spec.grpc_client == "grpcio":
            await stream.write(message)
            response = await stream.read()
            if not isinstance(response, bytes):
                raise RequestFailed("the server ended the stream")
        else:
            assert connection is not None
            response = await asyncio.wait_for(connection.stream_call(stream, message), self.spec.timeout_s)
        end = now_ns()
        error = grpc_error(response)
        if error is not None:
            raise RequestFailed(error)
        return start, end, 0, 0

    # closed loop: concurrency -------------------------------------------------------------------------
    def _set_concurrency(self, count: int) -> None:
        if self.rate_task is not None:
            self.rate_task.cancel()
            self.rate_task = None
        self.target = count
        self.slots = [t for t in self.slots if not t.done()]
        running = len(self.slots)
        for index in range(running, count):
            self.slots.append(self.loop.create_task(self._slot(index)))

    async def _slot(self, index: int) -> None:
        spec = self.spec
        state = SequenceState() if spec.sequence_streams else None
        stream_call = None
        connection: HttpConnection | None = None
        h2: H2Connection | None = None  # the connection of this slot's stream
        group = (index + 1) // GRPC_SLOTS_PER_CONNECTION
        try:
            while index < self.target:
                if state is not None:
                    message, sequence_end = self._sequence_request(state)
                else:
                    message, sequence_end = self._plain_request(), False
                self.sent += 1
                if spec.protocol == "http":
                    if connection is None or connection.closed:
                        connection = await self._http_connect()
                    timing = await self._http_exchange(connection, message)
                elif spec.streaming:
                    if stream_call is None:
                        if spec.grpc_client == "grpcio":
                            stream_call = self.grpc_stream(metadata=spec.grpc_metadata or None)
                        else:
                            h2 = await self._h2(group)
                            stream_call = h2.open_stream(self.stream_block)
                    timing = await self._stream_exchange(stream_call, message, h2)
                else:
                    timing = await self._grpc_exchange(message, group)
                self._record(*timing, sequence_end)
        except RequestFailed as exc:
            self._error(str(exc))
        except (TimeoutError, OSError) as exc:
            self._error(_connection_error(exc, spec))
        except Exception as exc:  # a worker must report, never die silently
            self._error(describe(exc))
        finally:
            if connection is not None and connection.transport is not None:
                connection.transport.close()
            if stream_call is not None:
                if spec.grpc_client == "grpcio":
                    stream_call.cancel()
                elif h2 is not None:
                    h2.close_stream(stream_call)

    # open loop: request rate ----------------------------------------------------------------------
    def _set_rate(self, per_second: float, poisson: bool) -> None:
        self.target = 0
        if self.rate_task is not None:
            self.rate_task.cancel()
        if self.spec.sequence_streams and not self.rate_sequences:
            self.rate_sequences = [SequenceState() for _ in range(max(1, self.spec.num_of_sequences))]
            self.rate_locks = [asyncio.Lock() for _ in self.rate_sequences]
        self.rate_task = self.loop.create_task(self._schedule(per_second, poisson))

    async def _schedule(self, per_second: float, poisson: bool) -> None:
        if per_second <= 0:
            return
        interval_ns = 1e9 / per_second
        due = float(now_ns())
        while True:
            current = now_ns()
            while due <= current:
                task = self.loop.create_task(self._one_shot(int(due)))
                self.inflight.add(task)
                task.add_done_callback(self.inflight.discard)
                due += self.rng.expovariate(1.0) * interval_ns if poisson else interval_ns
            await asyncio.sleep(max(0.0, (due - now_ns()) / 1e9))

    async def _one_shot(self, due_ns: int) -> None:
        spec = self.spec
        sequence_end = False
        lock: asyncio.Lock | None = None
        try:
            if self.rate_sequences:
                index = self.next_sequence_slot()
                lock = self.rate_locks[index]
                await lock.acquire()  # one request at a time per sequence: the START one arrives first
                message, sequence_end = self._sequence_request(self.rate_sequences[index])
            else:
                message = self._plain_request()
            self.sent += 1
            if now_ns() - due_ns > 1_000_000:
                self.delayed += 1
            if spec.protocol == "http":
                connection = self.idle_http.pop() if self.idle_http else await self._http_connect()
                timing = await self._http_exchange(connection, message)
                self.idle_http.append(connection)
            else:
                timing = await self._grpc_exchange(message)
            self._record(*timing, sequence_end)
        except RequestFailed as exc:
            self._error(str(exc))
        except (TimeoutError, OSError) as exc:
            self._error(_connection_error(exc, spec))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error(describe(exc))
        finally:
            if lock is not None:
                lock.release()

    def next_sequence_slot(self) -> int:
        index = self.next_request % len(self.rate_sequences)
        self.next_request += 1
        return index

    async def run(self) -> None:
        if self.spec.protocol == "grpc" and self.spec.grpc_client == "grpcio":
            self._open_grpcio()
        self.loop.add_reader(self.conn.fileno(), self.on_command)
        # the event loop made the descriptor non-blocking; commands and answers are whole pickled
        # messages, read only when readable and written while the parent waits for them
        os.set_blocking(self.conn.fileno(), True)
        self.conn.send(("ready",))
        await self.stopped.wait()
        self.loop.remove_reader(self.conn.fileno())
        if self.grpc_channel is not None:
            await self.grpc_channel.close()
        for h2 in self.h2.values():
            if h2.transport is not None:
                h2.transport.close()
        for connection in self.idle_http:
            if connection.transport is not None:
                connection.transport.close()


def _connection_error(exc: BaseException, spec: LoadSpec) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer from {spec.host}:{spec.port} within {spec.timeout_s:g} s"
    return f"cannot reach {spec.host}:{spec.port}: {exc}"


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells us to stop
    conn = Connection(int(sys.argv[1]))
    spec: LoadSpec = conn.recv()
    if spec.protocol == "http" or spec.grpc_client == "raw":
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(Worker(spec, conn).run())
    finally:
        loop.close()


if __name__ == "__main__":
    main()
