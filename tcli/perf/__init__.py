"""`tcli perf`: perf_analyzer's measurements, in Python.

stats.py      pure statistics: latency summaries, the stability rule, server statistics deltas
model.py      what perf needs to know about a model (inputs, batching, sequence, ensemble steps)
data.py       input data: random, zero, or perf_analyzer's JSON format
encode.py     requests encoded once, before measuring (HTTP bytes, gRPC serialized messages)
worker.py     the load generator process (asyncio; raw HTTP/1.1 keep-alive or grpc.aio with raw bytes)
profiler.py   levels, measurement windows and the stability loop, over one or more worker processes
report.py     perf_analyzer's console text, CSV columns, and the JSON form
plot.py       the latency/throughput chart (matplotlib, imported only for --plot)
"""
