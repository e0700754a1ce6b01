"""tcli's HTTP/1.1 server (server/frontends/http/server.py and the modules it stands on), over real
sockets against a real server on a free port: what a client of any HTTP library would notice.
The app here is a small ASGI app with the fast path's interface (http_direct.DirectInference), so
both ways a request can be answered are exercised."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import uvloop

from server.frontends.http.direct import InferHeaders
from server.frontends.http.limits import ConnectionLimits
from server.frontends.http.server import HttpServerHandle, serve_http

WAIT = 30.0


class App:
    """Echo and friends over ASGI; POST /v2/models/{m}/infer answered directly."""

    max_input_size = 1 << 20
    restricted_inference = None
    tracer = SimpleNamespace(enabled=False)  # no tracing

    def __init__(self) -> None:
        self.events: list[str] = []
        self.direct_calls = 0
        self.release = asyncio.Event()

    def infer_target(self, path: bytes) -> tuple[str, str] | None:
        parts = path.split(b"/")
        if len(parts) == 5 and parts[1:3] == [b"v2", b"models"] and parts[4] == b"infer":
            return parts[3].decode(), ""
        return None

    async def infer_direct(
        self, model: str, version: str, headers: InferHeaders, body: bytes | bytearray
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        self.direct_calls += 1
        if model == "slow":
            await asyncio.sleep(0.05)
        return 200, [(b"content-type", b"text/plain")], b"infer:" + bytes(body)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/stream":
            return await self._stream(receive, send)
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.events.append(f"disconnected {path}")
                return
            body += message["body"]
            if not message["more_body"]:
                break
        if self.infer_target(path.encode()) is not None:  # the same answer as the fast path's
            headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body) + 6).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"infer:" + body})
            return
        if path == "/slow":
            await asyncio.sleep(0.05)
        if path == "/held":
            self.events.append("held")
            await self.release.wait()
        if path == "/nolength":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for piece in (b"ab", b"cd"):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = f"{scope['method']} {path} {scope['query_string'].decode()} ".encode() + body
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _stream(self, receive: Any, send: Any) -> None:
        """Events until the client goes away (it has no body to read, so `receive` waits for that)."""
        await receive()
        gone = asyncio.get_running_loop().create_task(receive())
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        count = 0
        while not gone.done():
            await send({"type": "http.response.body", "body": b"data: %d\n\n" % count, "more_body": True})
            count += 1
            await asyncio.sleep(0.005)
        self.events.append(f"stream saw {(await gone)['type']}")


class Served:
    """serve_http in an event loop of its own thread, as `tcli serve` runs it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = self.call(lambda: _make_app())
        self.handle: HttpServerHandle = self.call(
            lambda: serve_http(self.app, host, port, direct=self.app, **options)
        )
        self.port = self.handle.port

    def call(self, make: Callable[[], Any]) -> Any:
        async def run() -> Any:
            result = make()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(WAIT)

    def stop(self) -> None:
        if self.loop.is_running():
            self.call(self.handle.shutdown)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT)


def _make_app() -> App:
    return App()  # made on the server's loop: its Event belongs there


@pytest.fixture
def served() -> Iterator[Served]:
    server = Served()
    yield server
    server.stop()


def connect(server: Served, host: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection((host, server.port), timeout=WAIT)


def read_response(stream: Any) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names), body (by Content-Length, chunks, or up to
    the close)."""
    line = stream.readline()
    assert line, "the server closed the connection"
    status = int(line.split()[1])
    headers: dict[str, str] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, stream.read(int(headers["content-length"]))
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int(stream.readline(), 16):
            body += stream.read(size)
            assert stream.read(2) == b"\r\n"
        assert stream.readline() == b"\r\n"
        return status, headers, body
    return status, headers, stream.read()


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def request(method: str, target: str, body: bytes = b"", *headers: str, version: str = "HTTP/1.1") -> bytes:
    lines = [f"{method} {target} {version}", "Host: tcli", *headers]
    if body and not any(h.lower().startswith("transfer-encoding") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_pipelined_requests_are_answered_in_order(served: Served) -> None:
    data = (
        request("POST", "/slow", b"one")
        + request("POST", "/v2/models/fast/infer", b"two")
        + request("GET", "/echo?x=3")
        + request("POST", "/v2/models/slow/infer", b"four")
        + request("POST", "/echo", b"five")
    )
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(data)  # in one write: the server reads them together
        bodies = [read_response(stream)[2] for _ in range(5)]
    assert bodies == [b"POST /slow  one", b"infer:two", b"GET /echo x=3 ", b"infer:four", b"POST /echo  five"]


def test_keep_alive_serves_many_requests_on_one_connection_the_fast_path_among_them(served: Served) -> None:
    served.app.direct_calls = 0
    with connect(served) as sock, sock.makefile("rb") as stream:
        for n in range(5):
            sock.sendall(request("POST", "/v2/models/m/infer", b"%d" % n))
            status, headers, body = read_response(stream)
            assert (status, body) == (200, b"infer:%d" % n) and "connection" not in headers
            sock.sendall(request("GET", f"/echo?n={n}"))
            assert read_response(stream)[2] == f"GET /echo n={n} ".encode()
    assert served.app.direct_calls == 5


def test_a_chunked_request_body_is_accepted(served: Served) -> None:
    pieces = [b"hello ", b"chunked ", b"world"]
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with connect(served) as sock, sock.makefile("rb") as stream:
        for target in ("/echo", "/v2/models/m/infer"):  # an inference request without length: through ASGI
            head = request("POST", target, b"", "Transfer-Encoding: chunked")
            sock.sendall(head)
            for n in range(0, len(body), 5):  # in small pieces, as a client streaming its body would
                sock.sendall(body[n : n + 5])
            status, _, answer = read_response(stream)
            assert status == 200 and answer.endswith(b"hello chunked world")


@pytest.mark.parametrize("target", ["/echo", "/v2/models/m/infer"])
def test_connection_close_is_honoured(served: Served, target: str) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("POST", target, b"x", "Connection: close") + request("GET", "/echo"))
        status, headers, _ = read_response(stream)
        assert status == 200 and headers["connection"] == "close"
        assert stream.read() == b""  # closed; the request after it was not answered


def test_http10_is_answered_then_closed_and_never_chunked(served: Served) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("POST", "/v2/models/m/infer", b"ten", version="HTTP/1.0"))
        status, headers, body = read_response(stream)
        assert (status, headers["connection"], body) == (200, "close", b"infer:ten")
        assert stream.read() == b""
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("GET", "/nolength", version="HTTP/1.0"))
        status, headers, body = read_response(stream)  # no length: the body ends with the connection
        assert (status, body) == (200, b"abcd") and "transfer-encoding" not in headers


def test_a_body_without_length_is_sent_chunked_on_http11(served: Served) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("GET", "/nolength") + request("GET", "/echo"))
        status, headers, body = read_response(stream)
        assert (status, headers["transfer-encoding"], body) == (200, "chunked", b"abcd")
        assert read_response(stream)[2] == b"GET /echo  "  # the connection is still good


def test_expect_100_continue_is_answered_before_the_body_is_sent(served: Served) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("POST", "/echo", b"", "Content-Length: 4", "Expect: 100-continue"))
        assert stream.readline() == b"HTTP/1.1 100 Continue\r\n"
        assert stream.readline() == b"\r\n"
        sock.sendall(b"body")
        assert read_response(stream)[:3:2] == (200, b"POST /echo  body")


def test_a_client_leaving_mid_stream_ends_the_stream_and_the_server_goes_on(served: Served) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("GET", "/stream"))
        assert stream.readline().startswith(b"HTTP/1.1 200")
        while b"data: 2" not in stream.readline():
            pass
    wait_for(lambda: "stream saw http.disconnect" in served.app.events)
    for _ in range(10):  # clients that leave before their answer
        with connect(served) as sock:
            sock.sendall(request("POST", "/slow", b"x") + request("POST", "/v2/models/slow/infer", b"y"))
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("POST", "/v2/models/m/infer", b"still here"))
        assert read_response(stream)[2] == b"infer:still here"


def test_a_malformed_request_gets_400_and_a_close(served: Served) -> None:
    for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n"):
        with connect(served) as sock, sock.makefile("rb") as stream:
            sock.sendall(garbage)
            status, headers, _ = read_response(stream)
            assert (status, headers["connection"]) == (400, "close")
            assert stream.read() == b""


def test_oversized_headers_get_431(served: Served) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(b"GET /echo HTTP/1.1\r\n")
        with contextlib.suppress(OSError):  # the server may close while this is still sending
            for n in range(200):
                sock.sendall(b"X-Filler-%d: %s\r\n" % (n, b"y" * 1000))
        assert read_response(stream)[0] == 431


def test_idle_keep_alive_connections_close_after_the_timeout() -> None:
    server = Served(limits=ConnectionLimits(keep_alive_timeout=0.3))
    try:
        with connect(server) as sock, sock.makefile("rb") as stream:
            sock.sendall(request("GET", "/echo"))
            assert read_response(stream)[0] == 200
            sock.settimeout(WAIT)
            assert stream.read() == b""  # closed by the server, with nothing more sent
    finally:
        server.stop()


def test_shutdown_finishes_the_request_in_flight_and_closes_idle_connections() -> None:
    server = Served()
    with connect(server) as busy, busy.makefile("rb") as busy_stream, connect(server) as idle:
        idle.sendall(request("GET", "/echo"))
        assert read_response(idle.makefile("rb"))[0] == 200
        busy.sendall(request("POST", "/held", b"work"))
        wait_for(lambda: "held" in server.app.events)
        stopping = asyncio.run_coroutine_threadsafe(server.handle.shutdown(), server.loop)
        idle.settimeout(WAIT)
        assert idle.recv(1) == b""  # the idle connection is closed at once
        with pytest.raises(OSError):  # and no new connection is accepted
            connect(server).close()
        server.call(lambda: server.app.release.set())
        status, headers, body = read_response(busy_stream)
        assert (status, headers["connection"], body) == (200, "close", b"POST /held  work")
        stopping.result(WAIT)
    server.loop.call_soon_threadsafe(server.loop.stop)
    server.thread.join(WAIT)


def test_dual_stack_bind_serves_ipv4_and_ipv6() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        server = Served("::")
    except OSError as error:
        pytest.skip(f"cannot bind [::]: {error}")
    try:
        for host in ("127.0.0.1", "::1"):
            with connect(server, host) as sock, sock.makefile("rb") as stream:
                sock.sendall(request("GET", "/echo"))
                assert read_response(stream)[0] == 200
    finally:
        server.stop()


def test_reuse_port_lets_two_servers_share_a_port() -> None:
    first = Served(reuse_port=True)
    try:
        second = Served(port=first.port, reuse_port=True)
        try:
            with connect(first) as sock, sock.makefile("rb") as stream:
                sock.sendall(request("GET", "/echo"))
                assert read_response(stream)[0] == 200
        finally:
            second.stop()
        with pytest.raises(OSError):  # without the option, the port is taken
            Served(port=first.port)
    finally:
        first.stop()


@pytest.mark.parametrize("target", ["/echo", "/v2/models/m/infer"])
def test_a_malformed_chunked_body_gets_400_and_the_app_sees_the_client_go(
    served: Served, target: str
) -> None:
    with connect(served) as sock, sock.makefile("rb") as stream:
        sock.sendall(request("POST", target, b"", "Transfer-Encoding: chunked") + b"5\r\nhello\r\nzz\r\n")
        status, headers, _ = read_response(stream)
        assert (status, headers["connection"]) == (400, "close")
        assert stream.read() == b""
    if target == "/echo":
        wait_for(lambda: "disconnected /echo" in served.app.events)
