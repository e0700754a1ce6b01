"""TLS on the gRPC front end (both implementations) and HTTPS on the HTTP front end, with certificates
made here (tests/integration/certificates.py), through tritonclient's own TLS options: inference and
streaming over TLS, mutual TLS that takes a client signed by the root certificate and refuses others,
plain-text clients refused while the server goes on serving, and `tcli serve`'s flags, including the
one-line start-up error for a certificate that cannot be read."""

from __future__ import annotations

import json
import os
import queue
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from server.app import Server, ServerSettings
from server.frontends.grpc import GRPC_IMPLEMENTATIONS
from tests.integration.certificates import Certificates, make_certificates
from tests.integration.conftest import link_repository
from tests.integration.serve_process import TCLI, ServeProcess
from tests.reference import reference_dir

# what a refused HTTPS connection looks like to tritonclient.http (geventhttpclient)
HTTP_REFUSED = (OSError, HTTPConnectionClosed)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return link_repository(tmp_path_factory.mktemp("repo") / "models", ["simple"])


def _start(repository: Path, certs: Certificates, implementation: str, mutual: bool) -> Server:
    settings = ServerSettings(
        [repository],
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        allow_metrics=False,
        exit_timeout_secs=10,
        grpc_implementation=implementation,
        grpc_use_ssl=True,
        grpc_use_ssl_mutual=mutual,
        grpc_server_cert=str(certs.server_cert),
        grpc_server_key=str(certs.server_key),
        grpc_root_cert=str(certs.ca),
        http_use_ssl=True,
        http_use_ssl_mutual=mutual,
        http_server_cert=str(certs.server_cert),
        http_server_key=str(certs.server_key),
        http_root_cert=str(certs.ca),
    )
    return Server(settings).start()


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def tls_server(request: pytest.FixtureRequest, repository: Path, certs: Certificates) -> Iterator[Server]:
    """HTTPS and gRPC over TLS (server authentication only), once per gRPC implementation."""
    server = _start(repository, certs, request.param, mutual=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=GRPC_IMPLEMENTATIONS)
def mutual_server(request: pytest.FixtureRequest, repository: Path, certs: Certificates) -> Iterator[Server]:
    """HTTPS and gRPC with mutual TLS: clients need a certificate signed by the test CA."""
    server = _start(repository, certs, request.param, mutual=True)
    try:
        yield server
    finally:
        server.stop()


def _inputs(module: object, offset: int = 0) -> list:
    a = module.InferInput("INPUT0", [1, 16], "INT32")  # type: ignore[attr-defined]
    a.set_data_from_numpy(np.arange(offset, offset + 16, dtype=np.int32)[None])
    b = module.InferInput("INPUT1", [1, 16], "INT32")  # type: ignore[attr-defined]
    b.set_data_from_numpy(np.ones((1, 16), np.int32))
    return [a, b]


def _check(result: object, offset: int = 0) -> None:
    expected = np.arange(offset, offset + 16, dtype=np.int32)[None]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected + 1)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected - 1)  # type: ignore[attr-defined]


def _grpc(
    server: Server | int, certs: Certificates, client_cert: str = "client"
) -> grpcclient.InferenceServerClient:
    """A TLS gRPC client trusting the test CA, presenting `client_cert` ("client", "stranger", "")."""
    port = server if isinstance(server, int) else server.grpc_port
    chain = {
        "client": (certs.client_key, certs.client_cert),
        "stranger": (certs.stranger_key, certs.stranger_cert),
    }
    key, cert = chain.get(client_cert, (None, None))
    return grpcclient.InferenceServerClient(
        f"127.0.0.1:{port}",
        ssl=True,
        root_certificates=str(certs.ca),
        private_key=None if key is None else str(key),
        certificate_chain=None if cert is None else str(cert),
    )


def _https(
    server: Server | int, certs: Certificates, client_cert: str = "client"
) -> httpclient.InferenceServerClient:
    port = server if isinstance(server, int) else server.http_port
    options = {"ca_certs": str(certs.ca)}
    if client_cert == "client":
        options |= {"certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
    elif client_cert == "stranger":
        options |= {"certfile": str(certs.stranger_cert), "keyfile": str(certs.stranger_key)}
    return httpclient.InferenceServerClient(f"127.0.0.1:{port}", ssl=True, ssl_options=options)


# gRPC ---------------------------------------------------------------------------------------------------
def test_grpc_inference_over_tls(tls_server: Server, certs: Certificates) -> None:
    client = _grpc(tls_server, certs, client_cert="")
    assert client.is_server_ready()
    _check(client.infer("simple", _inputs(grpcclient), client_timeout=30))
    assert client.get_model_metadata("simple").name == "simple"


def test_grpc_stream_infer_over_tls(tls_server: Server, certs: Certificates) -> None:
    client = _grpc(tls_server, certs, client_cert="")
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)), stream_timeout=30)
    try:
        for i in range(3):
            client.async_stream_infer("simple", _inputs(grpcclient, 10 * i), request_id=str(i))
        answers = [results.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
    for i, (result, error) in enumerate(answers):
        assert error is None, error
        assert result.get_response().id == str(i)  # type: ignore[attr-defined]
        _check(result, 10 * i)


def test_grpc_plain_text_client_is_refused_and_the_server_keeps_serving(
    tls_server: Server, certs: Certificates
) -> None:
    plain = grpcclient.InferenceServerClient(f"127.0.0.1:{tls_server.grpc_port}")
    with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
        plain.is_server_live(client_timeout=10)
    _check(_grpc(tls_server, certs, client_cert="").infer("simple", _inputs(grpcclient), client_timeout=30))


def test_grpc_mutual_tls_takes_a_signed_client_and_refuses_others(
    mutual_server: Server, certs: Certificates
) -> None:
    for refused in ("", "stranger"):  # no certificate; one signed by another CA
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            _grpc(mutual_server, certs, client_cert=refused).is_server_live(client_timeout=10)
    client = _grpc(mutual_server, certs, client_cert="client")
    _check(client.infer("simple", _inputs(grpcclient), client_timeout=30))


# HTTPS --------------------------------------------------------------------------------------------------
def test_https_inference_and_other_requests(tls_server: Server, certs: Certificates) -> None:
    client = _https(tls_server, certs, client_cert="")
    assert client.is_server_live() and client.is_server_ready()
    for _ in range(3):  # on one kept-alive TLS connection: the inference fast path, then ASGI
        _check(client.infer("simple", _inputs(httpclient)))
        assert client.get_model_metadata("simple")["name"] == "simple"
        assert [m["name"] for m in client.get_model_repository_index()] == ["simple"]  # a POST via ASGI
    stats = client.get_inference_statistics("simple")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] >= 3


def test_https_json_inference_through_asgi(tls_server: Server, certs: Certificates) -> None:
    """Bodies the fast path does not take go through the ASGI cycle, over TLS as in plain text."""
    body = (
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": %s},'
        % (str(list(range(16))).encode())
        + b'{"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": %s}]}' % str([1] * 16).encode()
    )
    context = ssl.create_default_context(cafile=str(certs.ca))
    # chunked (urllib sends an iterable body so), and 3 MiB (whitespace after the JSON): past the fast
    # path's limit, read by ASGI at its pace (reading paused and resumed on the TLS transport)
    for data in (iter([body[:40], body[40:]]), body + b" " * (3 * 2**20)):
        request = urllib.request.Request(
            f"https://127.0.0.1:{tls_server.http_port}/v2/models/simple/infer",
            data=data,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            answer = json.loads(response.read())
        outputs = {o["name"]: o["data"] for o in answer["outputs"]}
        assert outputs["OUTPUT0"] == [i + 1 for i in range(16)]


def test_http_plain_text_client_is_refused_and_the_server_keeps_serving(
    tls_server: Server, certs: Certificates
) -> None:
    plain = httpclient.InferenceServerClient(f"127.0.0.1:{tls_server.http_port}", network_timeout=10)
    with pytest.raises(HTTP_REFUSED):
        plain.is_server_live()
    _check(_https(tls_server, certs, client_cert="").infer("simple", _inputs(httpclient)))


def test_https_mutual_tls_takes_a_signed_client_and_refuses_others(
    mutual_server: Server, certs: Certificates
) -> None:
    for refused in ("", "stranger"):
        with pytest.raises(HTTP_REFUSED):
            _https(mutual_server, certs, client_cert=refused).is_server_live()
    _check(_https(mutual_server, certs, client_cert="client").infer("simple", _inputs(httpclient)))


# `tcli serve` -------------------------------------------------------------------------------------------
def test_serve_flags_turn_tls_on_and_metrics_stay_plain(repository: Path, certs: Certificates) -> None:
    """Triton's gRPC flags in both forms (--flag=value, --flag value), the HTTPS flags, and the metrics
    port in plain HTTP, as Triton serves it."""
    serving = ServeProcess(
        str(repository),
        "--grpc-use-ssl-mutual=on",  # given at all, it turns TLS on (tritonserver's parser does)
        f"--grpc-server-cert={certs.server_cert}",
        "--grpc-server-key",
        str(certs.server_key),
        "--grpc-root-cert",
        str(certs.ca),
        "--http-use-ssl",
        "true",
        f"--http-server-cert={certs.server_cert}",
        f"--http-server-key={certs.server_key}",
    )
    try:
        output = serving.output()
        assert "Started HTTPS on" in output and "gRPC (TLS) on" in output, output
        _check(_grpc(serving.grpc_port, certs).infer("simple", _inputs(grpcclient), client_timeout=30))
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            _grpc(serving.grpc_port, certs, client_cert="").is_server_live(client_timeout=10)
        _check(_https(serving.http_port, certs, client_cert="").infer("simple", _inputs(httpclient)))
        metrics_port = int(output.split("metrics on ")[1].split(":")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
            assert b"nv_inference_request_success" in response.read()
    finally:
        assert serving.stop() == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--grpc-use-ssl=true", "--grpc-server-cert={missing}", "--grpc-server-key={key}"],
            "error: --grpc-server-cert {missing}: cannot read the server's certificate: No such file or directory",
        ),
        (
            ["--grpc-use-ssl", "1", "--grpc-server-cert={cert}"],
            "error: --grpc-use-ssl needs --grpc-server-key: the server's private key (a PEM file)",
        ),
        (
            ["--grpc-use-ssl-mutual=true", "--grpc-server-cert={cert}", "--grpc-server-key={key}"],
            "error: --grpc-use-ssl-mutual needs --grpc-root-cert",
        ),
        (
            ["--grpc-use-ssl=true", "--grpc-server-cert={cert}", "--grpc-server-key={cert}"],
            "error: --grpc-server-key {cert}: not an unencrypted PEM private key of the certificate in "
            "--grpc-server-cert {cert}",
        ),
        (
            ["--http-use-ssl=true", "--http-server-cert={key}", "--http-server-key={key}"],
            "error: --http-server-cert {key}: no PEM certificate in it",
        ),
    ],
)
def test_serve_stops_at_once_on_a_certificate_it_cannot_use(
    repository: Path, certs: Certificates, tmp_path: Path, flags: list[str], message: str
) -> None:
    names = {
        "missing": str(tmp_path / "missing.pem"),
        "cert": str(certs.server_cert),
        "key": str(certs.server_key),
    }
    done = subprocess.run(
        [str(TCLI), "serve", str(repository), "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        + [flag.format(**names) for flag in flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 1, done.stderr
    assert message.format(**names) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "loaded" not in done.stderr  # before any model loads
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# real perf_analyzer ------------------------------------------------------------------------------------
def test_real_perf_analyzer_over_tls(tls_server: Server, certs: Certificates) -> None:
    perf_analyzer = reference_dir() / "bin" / "perf_analyzer"
    if not perf_analyzer.is_file():
        pytest.skip(f"real perf_analyzer not installed: no {perf_analyzer}")
    done = subprocess.run(
        [
            str(perf_analyzer),
            "-m",
            "simple",
            "-i",
            "grpc",
            "-u",
            f"localhost:{tls_server.grpc_port}",
            "--ssl-grpc-use-ssl",
            "true",
            "--ssl-grpc-root-certifications-file",
            str(certs.ca),
            "--request-count",
            "20",
            "--concurrency-range",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Throughput" in done.stdout, done.stdout


# tcli's client commands -----------------------------------------------------------------------------------
def _tcli_infer(*args: str) -> subprocess.CompletedProcess[str]:
    values = ",".join(str(i) for i in range(16))
    command = [
        str(TCLI),
        "infer",
        "-m",
        "simple",
        "--input",
        f"INPUT0={values}",
        "--input",
        "INPUT1=" + ",".join(["1"] * 16),
    ]
    return subprocess.run(
        [*command, "-f", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def _outputs(done: subprocess.CompletedProcess[str]) -> list[int]:
    assert done.returncode == 0, done.stdout + done.stderr
    [output] = [o for o in json.loads(done.stdout)["outputs"] if o["name"] == "OUTPUT0"]
    return [int(v) for v in np.array(output["data"]).reshape(-1)]


def test_tcli_infer_takes_perf_analyzers_tls_options(mutual_server: Server, certs: Certificates) -> None:
    expected = [i + 1 for i in range(16)]
    grpc_tls = ["-i", "grpc", "-u", f"127.0.0.1:{mutual_server.grpc_port}", "--ssl-grpc-use-ssl", "true"]
    grpc_tls += ["--ssl-grpc-root-certifications-file", str(certs.ca)]
    assert (
        _outputs(
            _tcli_infer(
                *grpc_tls,
                f"--ssl-grpc-private-key-file={certs.client_key}",
                f"--ssl-grpc-certificate-chain-file={certs.client_cert}",
            )
        )
        == expected
    )
    refused = _tcli_infer(*grpc_tls)  # no client certificate
    assert refused.returncode == 1 and "cannot reach" in refused.stderr, refused.stderr
    https = [
        "-u",
        f"https://127.0.0.1:{mutual_server.http_port}",
        "--ssl-https-ca-certificates-file",
        str(certs.ca),
    ]
    assert (
        _outputs(
            _tcli_infer(
                *https,
                f"--ssl-https-client-certificate-file={certs.client_cert}",
                f"--ssl-https-private-key-file={certs.client_key}",
            )
        )
        == expected
    )
    plain = _tcli_infer(
        "-u", f"127.0.0.1:{mutual_server.http_port}", "--ssl-https-ca-certificates-file", str(certs.ca)
    )
    assert plain.returncode == 1 and "write the URL as https://" in plain.stderr, plain.stderr


@pytest.mark.parametrize("client", ["raw", "grpcio"])
def test_tcli_perf_over_tls(mutual_server: Server, certs: Certificates, client: str) -> None:
    """tcli perf's load generators over gRPC with mutual TLS (its own HTTP/2 transport, and grpc.aio)
    and over HTTPS."""
    fast = [
        "-m",
        "simple",
        "-p",
        "200",
        "-s",
        "1000",
        "-r",
        "10",
        "--concurrency-range",
        "2",
    ]  # any 3 windows
    grpc_tls = ["--ssl-grpc-use-ssl", "true", "--ssl-grpc-root-certifications-file", str(certs.ca)]
    grpc_tls += ["--ssl-grpc-private-key-file", str(certs.client_key)]
    grpc_tls += ["--ssl-grpc-certificate-chain-file", str(certs.client_cert)]
    https_tls = ["--ssl-https-ca-certificates-file", str(certs.ca)]
    https_tls += ["--ssl-https-client-certificate-file", str(certs.client_cert)]
    https_tls += ["--ssl-https-private-key-file", str(certs.client_key)]
    runs = {
        "grpc": ["-i", "grpc", "-u", f"127.0.0.1:{mutual_server.grpc_port}", *grpc_tls],
        "https": ["-u", f"https://127.0.0.1:{mutual_server.http_port}", *https_tls],
    }
    for name, args in runs.items():
        done = subprocess.run(
            [str(TCLI), "perf", *fast, *args],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TCLI_PERF_GRPC_CLIENT": client},
        )
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
        assert "Throughput" in done.stdout and "errors" not in done.stdout.lower(), done.stdout


def test_tcli_model_takes_perf_analyzers_tls_options(mutual_server: Server, certs: Certificates) -> None:
    grpc_tls = ["-i", "grpc", "-u", f"127.0.0.1:{mutual_server.grpc_port}", "--ssl-grpc-use-ssl=true"]
    grpc_tls += [f"--ssl-grpc-root-certifications-file={certs.ca}"]
    grpc_tls += [f"--ssl-grpc-private-key-file={certs.client_key}"]
    grpc_tls += [f"--ssl-grpc-certificate-chain-file={certs.client_cert}"]
    https_tls = ["-u", f"https://127.0.0.1:{mutual_server.http_port}"]
    https_tls += [f"--ssl-https-ca-certificates-file={certs.ca}"]
    https_tls += [f"--ssl-https-client-certificate-file={certs.client_cert}"]
    https_tls += [f"--ssl-https-private-key-file={certs.client_key}"]
    for args in (grpc_tls, https_tls):
        done = subprocess.run(
            [str(TCLI), "model", "list", "-f", "json", *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert [row["name"] for row in json.loads(done.stdout)] == ["simple"]
    missing = subprocess.run(
        [str(TCLI), "model", "list", *https_tls, "--ssl-https-ca-certificates-file=/no/such/ca.pem"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "--ssl-https-ca-certificates-file /no/such/ca.pem" in missing.stderr
    assert "Traceback" not in missing.stderr
