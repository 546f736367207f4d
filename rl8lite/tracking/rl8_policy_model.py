"""rl8's MLflow models of a cloud-pickled policy (:meth:`rl8lite.policies.Policy.save` returns
one): deterministic actions, log-probabilities and values, a DataFrame row per input step.

Examples:
    >>> import tempfile
    >>> import mlflow
    >>> from rl8lite.env import DiscreteDummyEnv
    >>> from rl8lite.policies import Policy
    >>> env = DiscreteDummyEnv(1)
    >>> policy = Policy(env.observation_spec, env.action_spec)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     mlflow.pyfunc.save_model(f"{tmp}/model", python_model=policy.save(f"{tmp}/policy.pkl"),
    ...                              artifacts={"policy": f"{tmp}/policy.pkl"})
    ...     frame = mlflow.pyfunc.load_model(f"{tmp}/model").predict({"obs": [[[1.0]] * 3] * 2})
    >>> len(frame), sorted(frame.columns)
    (6, ['actions', 'logp', 'values'])
"""

from __future__ import annotations

import os
from typing import Any

import cloudpickle
import numpy as np
import pandas as pd
import torch
from mlflow.pyfunc import PythonModel, PythonModelContext
from tensordict import TensorDict

from ..data import DataKeys
from ..specs import Composite, Spec

__all__ = ["MLflowPolicyModel", "MLflowRecurrentPolicyModel", "pickle_policy", "td2df"]

_COLUMNS = (DataKeys.ACTIONS, DataKeys.LOGP, DataKeys.VALUES)


def pickle_policy(policy: Any, path: str | os.PathLike[str], *,
                  recurrent: bool = False) -> PythonModel:
    """Cloud-pickle ``policy`` to ``path``; the MLflow model that serves it."""
    with open(path, "wb") as f:
        cloudpickle.dump(policy, f)
    return MLflowRecurrentPolicyModel() if recurrent else MLflowPolicyModel()


def td2df(td: TensorDict) -> pd.DataFrame:
    """A one-dimensional TensorDict as a DataFrame: a column per key, an array per row."""
    return pd.DataFrame({key: list(value.detach().cpu().numpy()) for key, value in td.items()})


def _batch(model_input: Any, spec: Spec, device: Any) -> TensorDict:
    """rl8's model input ``{"obs": [B, T, ...] arrays}`` as a TensorDict ``[B, T]``."""
    has_obs = isinstance(model_input, dict) and DataKeys.OBS in model_input
    value = _tensors(model_input[DataKeys.OBS] if has_obs else model_input, spec, device)
    leaf = value if isinstance(value, torch.Tensor) else next(iter(value.values(True, True)))
    if leaf.dim() < 3:
        raise ValueError("the policy's input arrays must be [B, T, ...] (at least 3-D), received"
                         f" {list(leaf.shape)}")
    return TensorDict({DataKeys.OBS: value}, batch_size=leaf.shape[:2], device=device)


def _tensors(value: Any, spec: Spec, device: Any) -> torch.Tensor | TensorDict:
    if isinstance(spec, Composite):
        leaves = {key: _tensors(value[key], spec[key], device) for key in spec}
        return TensorDict(leaves, batch_size=next(iter(leaves.values())).shape[:2], device=device)
    return torch.as_tensor(np.asarray(value), dtype=spec.dtype, device=device)


class _PickledPolicy(PythonModel):
    def load_context(self, context: PythonModelContext) -> None:
        with open(context.artifacts["policy"], "rb") as f:
            self.policy = cloudpickle.load(f)


class MLflowPolicyModel(_PickledPolicy):
    """rl8's MLflow model of a feedforward policy (:meth:`~rl8lite.policies.Policy.save`)."""

    def predict(  # MLflow reads a hint on model_input as a signature: none
        self, context: PythonModelContext, model_input, params: dict[str, Any] | None = None
    ) -> pd.DataFrame:
        """Deterministic actions, their log-probabilities and the values at every step of
        ``model_input["obs"]`` (``[B, T, ...]``): ``B * T`` rows."""
        batch = _batch(model_input, self.policy.observation_spec, self.policy.device)
        out = self.policy.sample(batch, kind="all", deterministic=True, return_logp=True,
                                 return_values=True)
        return td2df(out.select(*_COLUMNS))


class MLflowRecurrentPolicyModel(_PickledPolicy):
    """rl8's MLflow model of a recurrent policy: the outputs at every step, and the states after
    the last, a column per part of the model's ``state_spec``."""

    def predict(  # MLflow reads a hint on model_input as a signature: none
        self, context: PythonModelContext, model_input, params: dict[str, Any] | None = None
    ) -> list[pd.DataFrame]:
        policy = self.policy
        batch = _batch(model_input, policy.observation_spec, policy.device)
        rows, states = batch.batch_size[0], None
        if isinstance(model_input, dict) and DataKeys.STATES in model_input:
            raw = model_input[DataKeys.STATES]
            if isinstance(raw, dict):
                states = TensorDict({k: torch.as_tensor(np.asarray(v)) for k, v in raw.items()},
                                    batch_size=[rows]).to(policy.device)
            else:
                states = torch.as_tensor(np.asarray(raw), dtype=torch.float32, device=policy.device)
                states = states.reshape(rows, -1)
        out, next_states = policy.sample(batch, states, deterministic=True, return_logp=True,
                                         return_values=True)
        return [td2df(out.select(*_COLUMNS)), td2df(_named_states(policy, next_states))]


def _named_states(policy: Any, states: torch.Tensor) -> TensorDict:
    """Flat states ``[B, state_size]`` split by the model's ``state_spec`` (else one column)."""
    spec, rows = policy.state_spec, states.shape[0]
    if not isinstance(spec, Composite):
        return TensorDict({DataKeys.STATES: states}, batch_size=[rows])
    sizes = [int(np.prod(spec[key].shape)) for key in spec]
    parts = zip(list(spec), states.split(sizes, dim=1))
    return TensorDict({k: v.reshape(rows, *spec[k].shape) for k, v in parts}, batch_size=[rows])
