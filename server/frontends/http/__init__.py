"""The HTTP/REST front end: KServe v2 and Triton's extensions over HTTP/1.1 (`app`: the routes and
their handlers; `server`: the connections, read and written by `protocol`, `wire`, `writer`; `direct`
and `fast_path`: inference without the ASGI layer)."""
