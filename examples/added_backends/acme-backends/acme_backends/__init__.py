from server.backends.base import InstanceSpec, ModelContext, TensorModel


class Negate(TensorModel):
    """Backend 'negate': Y = -X for every model whose config says backend: "negate"."""

    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:  # load
        self.name = f"{context.config.name}/{instance.name}"

    def execute(self, inputs, output_names):  # one batch: merged inputs in, outputs by name out
        return {"Y": -inputs["X"]}

    def unload(self) -> None:  # the model goes: free what loading took
        pass
