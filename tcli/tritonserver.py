"""`tritonserver`: the server under Triton's own name, so a chart, job or script written for Triton runs
tcli unchanged (`tritonserver --model-store=s3://... --model-control-mode=poll`); the same as
`tcli serve` with the same arguments."""

from __future__ import annotations

import sys


def run() -> None:
    from tcli.main import run as tcli

    sys.argv = [sys.argv[0], "serve", *sys.argv[1:]]
    tcli()


if __name__ == "__main__":
    run()
