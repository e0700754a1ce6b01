"""`tcli repo import`: MLflow models as the source of a Triton model repository.

`uri` reads a model URI, `fetch` downloads the model with mlflow's own API, `signature` turns an
MLflow signature into Triton tensors, `entry` writes the repository entry (through
server/config/scaffold.py), `report` prints what was written, and `triton_model` is the python-backend
model written for pyfunc models. mlflow is imported only inside functions: `tcli --help` stays light.
"""
