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

Policy = Any  # the policy (rl8lite.policies.Policy)
from ..specs import Spec
from .export import IO_FILE, PROGRAM_FILE, export_policy


def _model_arguments(policy: Policy, observation_spec: Spec, folder: str) -> dict[str, Any]:
    """What ``mlflow.pyfunc`` needs to save or log the policy exported into ``folder``."""
    io = export_policy(policy, observation_spec, folder)
    return {
        "python_model": str(Path(__file__).with_name("_pyfunc_policy.py")),
        "artifacts": {"program": str(Path(folder, PROGRAM_FILE)), "io": str(Path(folder, IO_FILE))},
        "signature": _policy_signature(io),
        "input_example": _policy_input_example(io),
        # passed explicitly: inferring them costs seconds
        "pip_requirements": [
            f"mlflow=={mlflow.__version__}",
            f"torch=={torch.__version__.split('+')[0]}",
            f"numpy=={np.__version__}",
        ],
    }


def save_policy_model(policy: Policy, observation_spec: Spec, path: str | Path) -> None:
    """Save ``policy`` as an MLflow model in folder ``path`` (see ``rl8lite/tracking/_pyfunc_policy.py``).

    ``mlflow.pyfunc.load_model(path).predict(obs)`` then maps a numpy batch of
    observations (or a dict of them) to actions. Loading needs torch, numpy and
    mlflow, not rl8lite.

    Raises:
        ExportError: ``torch.export`` could not export the policy's model.
    """
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.pyfunc.save_model(str(path), **_model_arguments(policy, observation_spec, tmp))


def log_policy_model(
    run_id: str,
    policy: Policy,
    observation_spec: Spec,
    *,
    name: str,
    step: int,
    registered_model_name: str | None = None,
) -> Any:
    """Log ``policy`` as an MLflow 3 LoggedModel of run ``run_id`` (MLflow's current store);
    return its ``ModelInfo``.

    The model is listed in the run's Models tab and the experiment's Models view, the
    run's metrics at ``step`` are linked to it, and with ``registered_model_name`` it
    becomes a new version of that registered model. ``runs:/<run id>/<name>`` and
    ``models:/<model id>`` both load it.

    Raises:
        ExportError: ``torch.export`` could not export the policy's model.
    """
    from mlflow.models import Model

    with tempfile.TemporaryDirectory() as tmp:
        return Model.log(
            artifact_path=None, name=name, flavor=mlflow.pyfunc, run_id=run_id, step=step,
            registered_model_name=registered_model_name, **_model_arguments(policy, observation_spec, tmp),
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
