"""`tcli serve --log-verbose` does not turn on hpack's per-header DEBUG lines (several per gRPC call)."""

from __future__ import annotations

import logging


def test_verbose_server_logging_leaves_hpack_quiet() -> None:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        import server.frontends.grpc_native.frames  # noqa: F401  (the module that uses hpack)

        assert not logging.getLogger("hpack.hpack").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("tcli.server").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(level)
