"""`tcli perf`: perf_analyzer's measurements, in Python.

stats.py          pure statistics: latency summaries, the stability rule, server statistics deltas
model.py          what perf needs to know about a model (inputs, batching, sequence, ensemble steps)
data.py           input data: random, zero, or perf_analyzer's JSON format
encode.py         requests encoded once, before measuring (HTTP bytes, gRPC serialized messages)
load_spec.py      what the parent sends a worker (LoadSpec), the shared clock, RequestFailed
worker.py         the load generator process (asyncio, pre-encoded bytes over HTTP/1.1 or gRPC)
http1_client.py   the worker's HTTP/1.1 keep-alive connection (an asyncio Protocol)
h2_client.py      the worker's HTTP/2 connection for gRPC, on the server's HTTP/2 layer (server/protocol/http2)
grpc_messages.py  protobuf by hand: sequence parameters, a stream response's error message
profiler.py       levels, measurement windows and the stability loop, over one or more worker processes
prepare.py        before measuring: the model read from the server, the LoadSpec built from the flags
session.py        one measurement: the levels run in turn, then the summary, JSON, CSV and plot
progress.py       the live progress display and perf_analyzer's -v window lines
report.py         perf_analyzer's console text, CSV columns, and the JSON form
plot.py           the latency/throughput chart (matplotlib, imported only for --plot)
"""
