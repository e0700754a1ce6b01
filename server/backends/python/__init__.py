"""The python backend: Triton python models (`model.py` with `class TritonPythonModel`) run in tcli.

- `triton_python_backend_utils`: the module models import as `pb_utils`, plus the hooks the server installs
  (BLS executor, model manager, response transport, model scope, custom-metrics registry).
- `model_import`: imports a model file as an isolated module with our pb_utils importable.
- `autocomplete`: runs `TritonPythonModel.auto_complete_config` on a config dict.

Kept import-light: nothing here imports numpy, torch or the model files until asked.
"""
