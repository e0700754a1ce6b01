"""`tcli serve --log-verbose` does not turn on hpack's per-header DEBUG lines (several per gRPC call)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import logging
logging.basicConfig(level=logging.DEBUG)
import server.protocol.http2.header_decoder
print(logging.getLogger("hpack.hpack").isEnabledFor(logging.DEBUG),
      logging.getLogger("tcli.server").isEnabledFor(logging.DEBUG))
"""


def test_verbose_server_logging_leaves_hpack_quiet() -> None:
    # a fresh interpreter: the answer must not depend on what other tests did to logging
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
