"""Request tracing, as Triton's `--trace-config` and trace settings API describe it
(docs/user_guide/trace.md): which requests are traced (`manager`, `setting`), Triton's trace file
(`trace_file`, `triton_json`), OpenTelemetry spans (`otel`) and the command-line flags (`flags`).
What a traced request records on its way is server/protocol/trace.py."""
