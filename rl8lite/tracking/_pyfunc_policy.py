"""MLflow model (models-from-code: no rl8lite imports) serving a policy exported by
``rl8lite.tracking.export``: observations (and ``"recurrent_state"``) to actions (and state)."""

import json
from pathlib import Path

import mlflow
import numpy as np
import torch
from mlflow.exceptions import MlflowException


class PolicyModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context):
        self.io = json.loads(Path(context.artifacts["io"]).read_text())
        self.program = torch.export.load(context.artifacts["program"]).module()

    def initial_state(self, batch_size):
        """The zero state ``[batch_size, state_size]`` a recurrent policy starts an episode from."""
        if not self.io["recurrent"]:
            raise TypeError("this policy is not recurrent: it takes no state")
        (state,) = [spec for spec in self.io["inputs"] if spec["name"] == self.io["state_name"]]
        return np.zeros((batch_size, *state["shape"]), dtype=state["dtype"])

    # the signature declares no inputs (MLflow would refuse other dtypes): checked and cast here
    def predict(self, context, model_input: np.ndarray, params=None):
        deterministic = True if params is None else bool(params.get("deterministic", True))
        if not self.io["named_inputs"]:
            model_input = {self.io["inputs"][0]["name"]: model_input}
        specs = self.io["inputs"]
        tensors = [torch.from_numpy(_checked(model_input, spec, specs)) for spec in specs]
        sizes = {spec["name"]: len(t) for spec, t in zip(specs, tensors)}
        if len(set(sizes.values())) > 1:
            raise ValueError("every input must hold the same number of rows (the batch); received"
                             f" {sizes}")
        with torch.no_grad():
            outputs = self.program(*tensors, torch.tensor(deterministic))
        if self.io["recurrent"]:
            return {name: output.numpy() for name, output in zip(self.io["output_names"], outputs)}
        return outputs.numpy()


def _checked(model_input, spec, specs):
    """Input ``spec["name"]`` of ``model_input`` as a contiguous array of the policy's dtype."""
    name, shape = spec["name"], [-1, *spec["shape"]]
    if name not in model_input:
        raise MlflowException.invalid_parameter_value(
            f"the policy's input {name!r} is missing; its inputs are {[s['name'] for s in specs]}")
    array = np.asarray(model_input[name])
    if array.dtype.kind not in "biuf":
        raise MlflowException.invalid_parameter_value(
            f"the policy's input {name!r} has dtype {array.dtype}; it takes real numbers")
    if list(array.shape[1:]) != shape[1:]:
        raise MlflowException.invalid_parameter_value(
            f"the policy's input {name!r} must have shape {shape}, received {list(array.shape)}")
    return np.ascontiguousarray(array, dtype=spec["dtype"])


mlflow.models.set_model(PolicyModel())
