"""HTTP/REST client (KServe v2 with Triton's binary tensor extension) over httpx."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from server.protocol import bytes_codec, datatypes
from tcli.client.tls import ClientTls
from tcli.client.types import ClientError, InferInput, InferResult, RequestedOutput


class HttpClient:
    def __init__(self, url: str, timeout: float = 60.0, tls: ClientTls | None = None) -> None:
        import httpx

        base = url if "://" in url else f"http://{url}"
        self.url = base.rstrip("/")
        tls = tls or ClientTls()
        https = self.url.startswith("https://")
        if tls.https_given() and not https:
            raise ClientError(f"--ssl-https-* options apply to HTTPS: write the URL as https://{url}")
        verify = tls.https_context() if https else True
        self._http = httpx.Client(base_url=self.url, timeout=timeout, verify=verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # plumbing --------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach {self.url}: {exc} (is the server running? check -u)") from None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text or response.reason_phrase
            raise ClientError(message or f"HTTP {response.status_code}", response.status_code)
        return response

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = self._request(method, path, json=body) if body is not None else self._request(method, path)
        return response.json() if response.content else {}

    @staticmethod
    def _model_path(model: str, version: str) -> str:
        return f"/v2/models/{model}" + (f"/versions/{version}" if version else "")

    # health and metadata ---------------------------------------------------------------------------
    def is_live(self) -> bool:
        try:
            return bool(self._request("GET", "/v2/health/live").status_code == 200)
        except ClientError as exc:
            if exc.status is None:
                raise
            return False

    def is_ready(self) -> bool:
        try:
            return bool(self._request("GET", "/v2/health/ready").status_code == 200)
        except ClientError as exc:
            if exc.status is None:
                raise
            return False

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._json("GET", "/v2"))

    def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        return dict(self._json("GET", self._model_path(model, version)))

    def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return dict(self._json("GET", self._model_path(model, version) + "/config"))

    def is_model_ready(self, model: str, version: str = "") -> bool:
        try:
            self._request("GET", self._model_path(model, version) + "/ready")
        except ClientError as exc:
            if exc.status is None:
                raise
            return False
        return True

    # repository and statistics ---------------------------------------------------------------------
    def repository_index(self) -> list[dict[str, Any]]:
        return list(self._json("POST", "/v2/repository/index", {}))

    def load_model(self, model: str, config: str | None = None) -> None:
        body: dict[str, Any] = {"parameters": {"config": config}} if config else {}
        self._json("POST", f"/v2/repository/models/{model}/load", body)

    def unload_model(self, model: str, unload_dependents: bool = False) -> None:
        self._json(
            "POST",
            f"/v2/repository/models/{model}/unload",
            {"parameters": {"unload_dependents": unload_dependents}},
        )

    def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        path = (self._model_path(model, version) if model else "/v2/models") + "/stats"
        return dict(self._json("GET", path))

    # inference -------------------------------------------------------------------------------------
    def infer(
        self,
        model: str,
        inputs: list[InferInput],
        outputs: list[RequestedOutput] | None = None,
        version: str = "",
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> InferResult:
        body, header_length = encode_request(inputs, outputs, request_id, parameters)
        headers = {
            "Inference-Header-Content-Length": str(header_length),
            "Content-Type": "application/octet-stream",
        }
        response = self._request(
            "POST", self._model_path(model, version) + "/infer", content=body, headers=headers
        )
        length = response.headers.get("Inference-Header-Content-Length")
        return decode_response(response.content, int(length) if length is not None else None)


def encode_request(
    inputs: list[InferInput],
    outputs: list[RequestedOutput] | None,
    request_id: str = "",
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, int]:
    """JSON header plus binary tensors: the binary tensor extension tritonclient uses by default."""
    header: dict[str, Any] = {"inputs": []}
    if request_id:
        header["id"] = request_id
    blobs = []
    for tensor in inputs:
        raw = (
            bytes_codec.serialize(tensor.data)
            if tensor.datatype == "BYTES"
            else np.ascontiguousarray(tensor.data).tobytes()
        )
        header["inputs"].append(
            {
                "name": tensor.name,
                "shape": tensor.shape,
                "datatype": tensor.datatype,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        blobs.append(raw)
    request_parameters = dict(parameters or {})
    if outputs:
        header["outputs"] = [
            {
                "name": o.name,
                "parameters": {
                    "binary_data": True,
                    **({"classification": o.class_count} if o.class_count else {}),
                },
            }
            for o in outputs
        ]
    else:
        request_parameters["binary_data_output"] = True
    if request_parameters:
        header["parameters"] = request_parameters
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return encoded + b"".join(blobs), len(encoded)


def decode_response(body: bytes, header_length: int | None) -> InferResult:
    header = json.loads(body[:header_length] if header_length is not None else body)
    result = InferResult(header.get("model_name", ""), header.get("model_version", ""), header.get("id", ""))
    result.parameters = header.get("parameters", {})
    offset = header_length or 0
    for output in header.get("outputs", []):
        name, datatype, shape = output["name"], output["datatype"], output["shape"]
        size = output.get("parameters", {}).get("binary_data_size")
        if size is not None:
            raw = body[offset : offset + size]
            offset += size
            if datatype == "BYTES":
                array = bytes_codec.object_array(
                    bytes_codec.deserialize(raw, f"output '{name}'"), tuple(shape)
                )
            else:
                array = np.frombuffer(raw, dtype=datatypes.wire_to_numpy(datatype)).reshape(shape)
        elif datatype == "BYTES":
            array = np.array([str(v).encode() for v in output.get("data", [])], dtype=object).reshape(shape)
        else:
            array = np.array(output.get("data", []), dtype=datatypes.wire_to_numpy(datatype)).reshape(shape)
        result.outputs[name] = array
        result.datatypes[name] = datatype
    return result
