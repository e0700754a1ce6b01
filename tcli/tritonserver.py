"""`tritonserver`: the server under Triton's own name, so a chart, job or script written for Triton runs
tcli unchanged (`tritonserver --model-store=s3://... --model-control-mode=poll`); the same as
`tcli serve` with the same arguments."""

from __future__ import annotations


def run() -> None:
    import typer

    from tcli.commands import serve
    from tcli.main import run as tcli

    tcli(typer.main.get_command(serve.app), prog_name="tritonserver")


if __name__ == "__main__":
    run()
