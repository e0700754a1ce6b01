"""The OpenAI front end's options on `tcli serve` and `tritonserver`: off unless a port is asked;
restricted APIs (`--openai-restricted-api`, in tcli's form and in Triton's three words) answering 401
with an OpenAI error object; HTTPS and mutual TLS with the other front ends' flags; a bad spec
stopping start-up with one line."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from tests.integration.certificates import make_certificates
from tests.integration.openai_models import write_repository
from tests.integration.serve_process import TCLI, ServeProcess

DEADLINE = 30.0
FREE_PORTS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--http-address", "127.0.0.1"]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("openai_options") / "models")


def test_off_unless_asked(repository: Path) -> None:
    server = ServeProcess(str(repository))
    try:
        assert server.openai_port == 0 and "OpenAI" not in server.output()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "spec",
    ["inference,model-repository:api-key=secret", "inference,model-repository api-key secret"],
    ids=["tcli", "triton"],
)
def test_restricted_apis_answer_401_without_their_header(repository: Path, spec: str) -> None:
    server = ServeProcess(
        str(repository), "--openai-port", "0", "--openai-restricted-api", spec, program="tritonserver"
    )
    try:
        base = f"http://127.0.0.1:{server.openai_port}"
        refused = httpx.get(f"{base}/v1/models", timeout=DEADLINE)
        assert refused.status_code == 401
        assert refused.json()["error"] == {
            "message": "This API is restricted, expecting header 'api-key' with valid value",
            "type": "authentication_error",
            "code": "invalid_auth",
        }
        wrong = openai.OpenAI(
            base_url=f"{base}/v1",
            api_key="x",
            default_headers={"api-key": "wrong"},
            timeout=DEADLINE,
            max_retries=0,
        )
        with pytest.raises(openai.AuthenticationError):
            wrong.completions.create(model="mock_llm", prompt="x", max_tokens=1)
        right = openai.OpenAI(
            base_url=f"{base}/v1",
            api_key="x",
            default_headers={"api-key": "secret"},
            timeout=DEADLINE,
            max_retries=0,
        )
        assert right.completions.create(model="mock_llm", prompt="x", max_tokens=1).choices[0].text
        assert "mock_llm" in [model.id for model in right.models.list()]
        assert httpx.get(f"{base}/health/ready", timeout=DEADLINE).status_code == 200  # not restricted
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("inferencing:k=v", "Unknown API 'inferencing'"),
        ("inference", "--openai-restricted-api takes"),
    ],
)
def test_a_bad_restriction_stops_start_up_in_one_line(repository: Path, spec: str, words: str) -> None:
    result = subprocess.run(
        [
            str(TCLI),
            "serve",
            str(repository),
            *FREE_PORTS,
            "--openai-port",
            "0",
            "--openai-restricted-api",
            spec,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert words in result.stderr + result.stdout
    assert "Traceback" not in result.stderr + result.stdout


def test_https_and_mutual_tls(repository: Path, tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    server = ServeProcess(
        str(repository),
        "--openai-port",
        "0",
        "--openai-use-ssl-mutual=true",
        "--openai-server-cert",
        str(certs.server_cert),
        "--openai-server-key",
        str(certs.server_key),
        "--openai-root-cert",
        str(certs.ca),
    )
    try:
        assert f"OpenAIS on 127.0.0.1:{server.openai_port}" in server.output().replace("\n", "")
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        client = openai.OpenAI(
            base_url=f"https://127.0.0.1:{server.openai_port}/v1",
            api_key="x",
            http_client=httpx.Client(verify=context, timeout=DEADLINE),
            max_retries=0,
        )
        assert client.completions.create(model="mock_llm", prompt="x", max_tokens=2).choices[0].text
        stranger = ssl.create_default_context(cafile=str(certs.ca))
        stranger.load_cert_chain(str(certs.stranger_cert), str(certs.stranger_key))
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"https://127.0.0.1:{server.openai_port}/v1/models", verify=stranger, timeout=DEADLINE)
    finally:
        server.stop()


def test_a_missing_certificate_stops_start_up_naming_the_flag(repository: Path) -> None:
    result = subprocess.run(
        [str(TCLI), "serve", str(repository), *FREE_PORTS, "--openai-port", "0", "--openai-use-ssl=true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "--openai-server-cert" in result.stderr + result.stdout
