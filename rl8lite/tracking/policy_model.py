"""The policy as an MLflow model: a ``torch.export`` program served by a small pyfunc."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
import torch
from mlflow.models import ModelSignature
from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec

from ..algorithms.policy import Policy
from ..specs import Spec
from .export import IO_FILE, PROGRAM_FILE, export_policy


def save_policy_model(policy: Policy, observation_spec: Spec, path: str | Path) -> None:
    """Save ``policy`` as an MLflow model in folder ``path`` (see ``rl8lite/_pyfunc_policy.py``).

    ``mlflow.pyfunc.load_model(path).predict(obs)`` then maps a numpy batch of
    observations (or a dict of them) to actions. Loading needs torch, numpy and
    mlflow, not rl8lite. Requirements are passed explicitly (inferring them
    costs seconds).

    Raises:
        ExportError: ``torch.export`` could not export the policy's model.
    """
    requirements = [
        f"mlflow=={mlflow.__version__}",
        f"torch=={torch.__version__.split('+')[0]}",
        f"numpy=={np.__version__}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        io = export_policy(policy, observation_spec, tmp)
        mlflow.pyfunc.save_model(
            str(path),
            python_model=str(Path(__file__).with_name("_pyfunc_policy.py")),
            artifacts={"program": str(Path(tmp, PROGRAM_FILE)), "io": str(Path(tmp, IO_FILE))},
            signature=_policy_signature(io),
            input_example=_policy_input_example(io),
            pip_requirements=requirements,
        )


def _policy_input_example(io: dict[str, Any]) -> np.ndarray | dict[str, np.ndarray]:
    example = {spec["name"]: np.zeros((2, *spec["shape"]), dtype=spec["dtype"]) for spec in io["inputs"]}
    return example if io["named_inputs"] else next(iter(example.values()))


def _policy_signature(io: dict[str, Any]) -> ModelSignature:
    def tensor(spec: dict[str, Any], name: str | None) -> TensorSpec:
        return TensorSpec(np.dtype(spec["dtype"]), (-1, *spec["shape"]), name)

    inputs = [tensor(spec, spec["name"] if io["named_inputs"] else None) for spec in io["inputs"]]
    if io["recurrent"]:
        actions_name, state_name = io["output_names"]
        outputs = [tensor(io["actions"], actions_name), tensor(io["inputs"][-1], state_name)]
    else:
        outputs = [tensor(io["actions"], None)]
    return ModelSignature(
        inputs=Schema(inputs),
        outputs=Schema(outputs),
        params=ParamSchema([ParamSpec("deterministic", "boolean", True)]),
    )
