"""The parts of tcli's `triton_python_backend_utils`, one concept per module.

Models import the facade, `server.backends.python.triton_python_backend_utils` (as
`triton_python_backend_utils`), never these modules. tcli's server imports the host API from the module
that owns it: `requests.set_bls_executor`, `model_control.set_model_manager`, `scope` (model scope),
`metric_registry.METRICS` and `host_api` (request and tensor factories, dtype names).

- `datatypes`: flags, TRITONSERVER_DataType values, numpy types, BYTES (de)serialisation
- `model_config`: model-config dict lookups and ModelConfig (auto_complete_config)
- `errors`: TritonError, TritonModelException
- `dlpack`: reading DLPack capsules
- `tensor`: Tensor
- `memory`: PreferredMemory, MemoryType, InferenceTrace (compatibility only)
- `parameters`: request/response parameters as JSON
- `responses`: InferenceResponse, InferenceResponseSender, ResponseIterator
- `requests`: InferenceRequest with BLS exec/async_exec and the BLS hook
- `model_control`: load_model, unload_model, is_model_ready and the model-manager hook
- `scope`: which model runs in this context; get_model_dir
- `logger`: Logger
- `metric_registry`, `metrics`: the custom-metrics registry; MetricFamily and Metric
- `host_api`: request and tensor factories the server calls

Each module holds its own state (hooks, context variables, the METRICS registry) once; read it through
that module.
"""
