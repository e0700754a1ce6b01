"""The python backend: Triton python models (`model.py` with `class TritonPythonModel`) run in tcli.

- `triton_python_backend_utils`: the module models import as `pb_utils` (a facade over `pb_utils/`, one
  concept per module, where the hooks the server installs live: BLS executor, model manager, response
  transport, model scope, custom-metrics registry).
- `model_import`: imports a model file as an isolated module with our pb_utils importable.
- `autocomplete`: runs `TritonPythonModel.auto_complete_config` on a config dict.
- `host`: one instance in the server process (`PythonModel`).
- `placement`: in a process of its own (the default) or in the server process, per model (the
  TCLI_INSTANCE_PROCESS parameter, or the server's --backend-config=python,instance-process);
  `process_host` (server side), `process_worker` (the instance process), `process_life` (starting
  one, telling how one ended) and `shm` (tensors through shared memory) host an instance in its own
  process.

Kept import-light: nothing here imports numpy, torch or the model files until asked.
"""
