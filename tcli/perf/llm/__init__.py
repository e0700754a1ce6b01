"""`tcli perf` for language models, as NVIDIA's GenAI-Perf and AIPerf measure them: requests with
synthetic prompts sent at each concurrency level to an OpenAI endpoint (server-sent events) or to a
decoupled Triton model (gRPC ModelStreamInfer), each response's arrival timed, and per level the time
to first token, inter-token latency, request latency, sequence lengths and throughputs.

prompts.py makes the prompts and counts tokens, clients.py sends one request and times it,
metrics.py turns the timings into figures, runner.py drives the levels, report.py prints them."""
