"""The policy as an MLflow model: its ``torch.export`` program served by ``_pyfunc_policy.py``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
import torch
from mlflow.models import Model, ModelSignature
from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec

from ..specs import Spec
from .export import IO_FILE, PROGRAM_FILE, export_policy


def save_policy_model(policy: Any, observation_spec: Spec, path: str | Path) -> None:
    """Save ``policy`` as an MLflow model in folder ``path``, which loads without rl8lite.

    Raises:
        ExportError: The policy could not be exported (see :func:`~.export.export_policy`).

    Examples:
        >>> import numpy as np
        >>> from rl8lite import Algorithm
        >>> from rl8lite.examples import CartPole
        >>> algo = Algorithm(CartPole, num_envs=2, horizon=2)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save_policy_model(algo.policy, algo.env.observation_spec, f"{tmp}/policy")
        ...     model = mlflow.pyfunc.load_model(f"{tmp}/policy")
        >>> model.predict(np.zeros((3, 4))).shape
        (3, 1)
    """
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.pyfunc.save_model(str(path), **_model_arguments(policy, observation_spec, tmp))


def log_policy_model(run_id: str, policy: Any, observation_spec: Spec, *, name: str, step: int,
                     registered_model_name: str | None = None) -> Any:
    """Log ``policy`` as a LoggedModel of run ``run_id`` (in MLflow's current store), linked to
    the run's metrics at ``step``, a new version of ``registered_model_name`` if given; return
    its ``ModelInfo``."""
    with tempfile.TemporaryDirectory() as tmp:
        return Model.log(artifact_path=None, name=name, flavor=mlflow.pyfunc, run_id=run_id,
                         step=step, registered_model_name=registered_model_name,
                         **_model_arguments(policy, observation_spec, tmp))


def _model_arguments(policy: Any, observation_spec: Spec, folder: str) -> dict[str, Any]:
    """What ``mlflow.pyfunc`` needs to save or log the policy, exported into ``folder``."""
    io = export_policy(policy, observation_spec, folder)
    return {
        "python_model": str(Path(__file__).with_name("_pyfunc_policy.py")),
        "artifacts": {"program": str(Path(folder, PROGRAM_FILE)), "io": str(Path(folder, IO_FILE))},
        "signature": _signature(io),
        "input_example": _input_example(io),
        # explicit: inferring them costs seconds
        "pip_requirements": [f"mlflow=={mlflow.__version__}", f"numpy=={np.__version__}",
                             f"torch=={torch.__version__.split('+')[0]}"],
    }


def _input_example(io: dict[str, Any]) -> np.ndarray | dict[str, np.ndarray]:
    example = {s["name"]: np.zeros((2, *s["shape"]), dtype=s["dtype"]) for s in io["inputs"]}
    return example if io["named_inputs"] else next(iter(example.values()))


def _signature(io: dict[str, Any]) -> ModelSignature:
    """The outputs and params; no inputs, which ``_pyfunc_policy.py`` checks and casts itself
    (MLflow's check refuses any dtype but the declared one, e.g. numpy's float64)."""
    names = io["output_names"] or [None]
    outputs = [TensorSpec(np.dtype(spec["dtype"]), (-1, *spec["shape"]), name)
               for spec, name in zip([io["actions"], io["inputs"][-1]], names)]
    return ModelSignature(outputs=Schema(outputs),
                          params=ParamSchema([ParamSpec("deterministic", "boolean", True)]))
