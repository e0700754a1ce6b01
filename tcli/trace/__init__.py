"""`tcli trace`: reading Triton's trace files (`summary`: per-model phase times; `plot`: its chart)."""
