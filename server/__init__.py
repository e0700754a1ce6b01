"""tcli's Triton-compatible inference server. Importable without the CLI."""
