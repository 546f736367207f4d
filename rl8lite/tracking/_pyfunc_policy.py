"""MLflow model (models-from-code) serving a policy exported by ``rl8lite.export``.

MLflow copies this file into the saved model and runs it at load time, so it
must import nothing from rl8lite: loading a policy needs torch, numpy and
mlflow only.

``predict(obs)`` takes a numpy batch of observations (a dict of arrays for dict
observations) and returns the actions, deterministic unless
``params={"deterministic": False}``. A recurrent policy takes a dict holding the
observation (``"obs"``, or its keys) and ``"recurrent_state"``, and returns
``{"actions": ..., "recurrent_state": ...}``; start from
``model.unwrap_python_model().initial_state(batch_size)`` and, as in training,
zero a row's state where its episode ended.
"""

import json
from pathlib import Path

import mlflow
import numpy as np
import torch


class PolicyModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context):
        self.io = json.loads(Path(context.artifacts["io"]).read_text())
        self.program = torch.export.load(context.artifacts["program"]).module()

    def initial_state(self, batch_size):
        """The zero state a recurrent policy starts an episode from, ``[batch_size, state_size]``."""
        if not self.io["recurrent"]:
            raise TypeError("this policy is not recurrent: it takes no state")
        (state,) = [spec for spec in self.io["inputs"] if spec["name"] == self.io["state_name"]]
        return np.zeros((batch_size, *state["shape"]), dtype=state["dtype"])

    # MLflow reads the hint: np.ndarray makes it check inputs against the saved
    # signature alone (a dict of arrays, for named inputs, passes as well).
    def predict(self, context, model_input: np.ndarray, params=None):
        deterministic = True if params is None else bool(params.get("deterministic", True))
        if not self.io["named_inputs"]:
            model_input = {self.io["inputs"][0]["name"]: model_input}
        tensors = [
            torch.from_numpy(np.ascontiguousarray(model_input[spec["name"]], dtype=spec["dtype"]))
            for spec in self.io["inputs"]
        ]
        sizes = {spec["name"]: len(t) for spec, t in zip(self.io["inputs"], tensors)}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"every input must hold the same number of rows (the batch); received {sizes}")
        with torch.no_grad():
            outputs = self.program(*tensors, torch.tensor(deterministic))
        if self.io["recurrent"]:
            return {name: output.numpy() for name, output in zip(self.io["output_names"], outputs)}
        return outputs.numpy()


mlflow.models.set_model(PolicyModel())
