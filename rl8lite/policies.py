"""rl8's policies (``rl8.policies``): a model and its action distribution, sampled with
rl8's keyword flags.

:class:`Policy` and :class:`RecurrentPolicy` are what an algorithm holds as
``algorithm.policy``: rl8lite's :class:`~rl8lite.algorithms.policy.Policy` (the
methods the collect and the update call, one per job) with rl8's constructor and
public methods on top, so rl8 code and tests that drive a policy directly keep
working. ``sample`` takes a batch of sequences ``[B, T]`` and applies the model's view
requirements to it as rl8 does (each sequence is one episode starting at its first
step; the algorithm builds its windows from its buffer, episode-aware).

Differences from rl8: a recurrent policy's states are one ``[B, state_size]`` tensor
(rl8's were a TensorDict; :meth:`RecurrentPolicy.sample` takes either), and a model's
``features`` come back as a TensorDict holding rl8lite's flat features under
``"features"`` unless the model returns rl8's feature TensorDict itself.

Examples:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from rl8lite.data import DataKeys
    >>> from rl8lite.env import DiscreteDummyEnv
    >>> env = DiscreteDummyEnv(1)
    >>> policy = Policy(env.observation_spec, env.action_spec)
    >>> batch = TensorDict({DataKeys.OBS: env.observation_spec.rand([8, 4])}, batch_size=[8, 4])
    >>> out = policy.sample(batch, return_logp=True, return_values=True)  # at each sequence's last step
    >>> out[DataKeys.ACTIONS].shape, out[DataKeys.VALUES].shape
    (torch.Size([8, 1]), torch.Size([8, 1]))
    >>> policy.sample(batch, kind="all")[DataKeys.ACTIONS].shape  # at every step
    torch.Size([32, 1])
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from .algorithms.policy import Policy as _Policy
from .algorithms.policy import build_model
from .data import DataKeys, Device
from .distributions import Distribution
from .models import DefaultModel, DefaultRecurrentModel, Model, RecurrentModel
from .models.rl8_style import Rl8Model, Rl8RecurrentModel, flat_features
from .specs import Spec
from .views import ViewKind

__all__ = ["Policy", "RecurrentPolicy", "build_policy"]  # and, imported on use, rl8's MLflow models


@dataclass
class _ModelConfig:
    """What :func:`~rl8lite.algorithms.policy.build_model` reads from a config."""

    model: nn.Module | None = None
    model_cls: Any = None
    model_config: dict[str, Any] | None = None
    distribution_cls: type[Distribution] | None = None


class Policy(_Policy):
    """The union of a feedforward model and an action distribution (rl8's ``Policy``).

    Args:
        observation_spec: The env's observation spec.
        action_spec: The env's action spec.
        model: A model instance (excludes ``model_cls``).
        model_cls: A model class (or factory) called as
            ``model_cls(observation_spec, action_spec, **model_config)``; default:
            :class:`~rl8lite.models.DefaultModel` sized for the distribution.
        model_config: Keyword arguments of ``model_cls``.
        distribution_cls: The action distribution (default: the action spec's, see
            :meth:`~rl8lite.distributions.Distribution.default_dist_cls`).
        device: Where the model goes.
    """

    default_model_cls: type[Model] = DefaultModel

    def __init__(
        self,
        observation_spec: Spec,
        action_spec: Spec,
        /,
        *,
        model: nn.Module | None = None,
        model_cls: Any = None,
        model_config: dict[str, Any] | None = None,
        distribution_cls: type[Distribution] | None = None,
        device: Device = "cpu",
    ) -> None:
        if model is not None and model_cls is not None:
            raise ValueError("`model` and `model_cls` are mutually exclusive: pass one or the other")
        config = _ModelConfig(model, model_cls, model_config, distribution_cls)
        built, dist_cls = build_model(observation_spec, action_spec, config, self.default_model_cls)
        super().__init__(built, dist_cls, action_spec)
        self.observation_spec = observation_spec
        self.model_config = model_config or {}
        self.to(device)

    def sample(
        self,
        batch: TensorDict,
        /,
        *,
        kind: ViewKind = "last",
        deterministic: bool = False,
        inplace: bool = False,
        requires_grad: bool = False,
        return_actions: bool = True,
        return_logp: bool = False,
        return_values: bool = False,
        return_views: bool = False,
    ) -> TensorDict:
        """Sample the policy on a batch of sequences (rl8's ``Policy.sample``).

        Args:
            batch: TensorDict ``[B, T]`` with at least ``"obs"``; or one holding the
                model's inputs under ``DataKeys.VIEWS`` (they are used as they are).
            kind: ``"last"``: at each sequence's last step (``B`` rows); ``"all"``: at
                every step (``B * T`` rows, row ``b * T + t``).
            deterministic: The distribution's mode instead of a sample (the model runs in
                eval mode for it, in training mode otherwise).
            inplace: Write the outputs into ``batch`` reshaped to one batch dimension
                (for ``kind="all"``) instead of a new TensorDict.
            requires_grad: Build the autograd graph (for training).
            return_actions: Sample actions (``DataKeys.ACTIONS``).
            return_logp: Also their log-probabilities (``DataKeys.LOGP``, with actions).
            return_values: Also the values (``DataKeys.VALUES``).
            return_views: Also the model's inputs (``DataKeys.VIEWS``).

        Returns:
            A TensorDict with ``DataKeys.FEATURES`` and the outputs asked for.
        """
        views = batch[DataKeys.VIEWS] if DataKeys.VIEWS in batch.keys() else self.model_inputs(batch, kind)
        obs = views[DataKeys.OBS]
        with _mode(self.model, training=not deterministic), torch.set_grad_enabled(requires_grad):
            features_td, features, values = self._features(obs)
            out = batch.reshape(-1) if inplace else TensorDict({}, batch_size=[features.shape[0]], device=batch.device)
            out[DataKeys.FEATURES] = features_td
            self._outputs(out, features, obs, values, deterministic, return_actions, return_logp, return_values)
            if return_views:
                out[DataKeys.VIEWS] = views
        return out

    def _outputs(
        self, out: TensorDict, features: torch.Tensor, obs: Any, values: torch.Tensor, deterministic: bool,
        return_actions: bool, return_logp: bool, return_values: bool,
    ) -> None:
        """Write the actions (and their log-probabilities) and the values asked for into ``out``."""
        if return_actions:
            dist = self.distribution(features, obs)
            actions = dist.deterministic_sample() if deterministic else dist.sample()
            out[DataKeys.ACTIONS] = actions
            if return_logp:
                out[DataKeys.LOGP] = dist.logp(actions)
        if return_values:
            out[DataKeys.VALUES] = values

    def model_inputs(self, batch: TensorDict, kind: ViewKind) -> TensorDict:
        """The model's view requirements applied to ``batch`` (``[B]`` or ``[B * T]`` rows)."""
        if hasattr(self.model, "apply_view_requirements"):
            return self.model.apply_view_requirements(batch, kind=kind)
        return batch[:, -1] if kind == "last" else batch.reshape(-1)

    def _features(self, obs: Any) -> tuple[TensorDict, torch.Tensor, torch.Tensor]:
        """``(features as a TensorDict, flat features, values)``."""
        network = self.network
        if isinstance(network, Rl8Model):
            features_td, values = network.features_and_values(obs)
            return features_td, flat_features(features_td, model_name=network.name), values
        features, values = network(obs)
        return TensorDict({DataKeys.FEATURES: features}, batch_size=[features.shape[0]]), features, values

    def save(self, path: str | os.PathLike[str], /) -> Any:
        """Pickle the policy to ``path`` (cloudpickle, as rl8) and return the MLflow model
        that serves it: pass it as ``python_model`` with ``artifacts={"policy": path}``.

        The recommended way to save a trained policy is the ``torch.export`` program the
        trainer logs (:meth:`rl8lite.Trainer.log_policy`); this is rl8's.
        """
        from .tracking.rl8_policy_model import pickle_policy

        return pickle_policy(self, path)


class RecurrentPolicy(Policy):
    """The union of a recurrent model and an action distribution (rl8's ``RecurrentPolicy``).

    Arguments as :class:`Policy`'s; the default model is
    :class:`~rl8lite.models.DefaultRecurrentModel`.
    """

    default_model_cls: type[Model] = DefaultRecurrentModel

    def sample(  # type: ignore[override]
        self,
        batch: TensorDict,
        /,
        states: torch.Tensor | TensorDict | None = None,
        *,
        deterministic: bool = False,
        inplace: bool = False,
        requires_grad: bool = False,
        return_actions: bool = True,
        return_logp: bool = False,
        return_values: bool = False,
    ) -> tuple[TensorDict, torch.Tensor]:
        """Unroll the policy over sequences ``[B, T]`` from ``states`` (rl8's
        ``RecurrentPolicy.sample``).

        Args:
            batch: TensorDict ``[B, T]`` with at least ``"obs"``.
            states: ``[B, state_size]`` (or rl8's state TensorDict ``[B, 1]``/``[B]``);
                ``None``: :meth:`init_states`.
            deterministic, inplace, requires_grad, return_actions, return_logp,
                return_values: As in :meth:`Policy.sample`.

        Returns:
            The outputs at every step (``B * T`` rows, row ``b * T + t``) and the states
            after the last step ``[B, state_size]``.
        """
        rows, steps = batch.batch_size[:2]
        states = self.init_states(rows) if states is None else self.flat_states(states)
        obs = batch[DataKeys.OBS]
        features, values = [], []
        with _mode(self.model, training=not deterministic), torch.set_grad_enabled(requires_grad):
            for t in range(steps):
                step_features, step_values, states = self.network(obs[:, t], states)
                features.append(step_features)
                values.append(step_values)
            flat = _steps_as_rows(features)
            out = batch.reshape(-1) if inplace else TensorDict({}, batch_size=[rows * steps], device=batch.device)
            out[DataKeys.FEATURES] = TensorDict({DataKeys.FEATURES: flat}, batch_size=[rows * steps])
            self._outputs(out, flat, obs.flatten(0, 1), _steps_as_rows(values), deterministic, return_actions,
                          return_logp, return_values)
        return out, states

    def flat_states(self, states: torch.Tensor | TensorDict) -> torch.Tensor:
        """``[B, state_size]`` from a tensor or rl8's state TensorDict."""
        if isinstance(states, torch.Tensor):
            return states
        network = self.network
        if isinstance(network, Rl8RecurrentModel):
            return network.flat_states(states)
        return torch.cat([v.reshape(states.batch_size[0], -1) for v in states.values()], dim=-1)

    @property
    def state_spec(self) -> Any:
        """The model's ``state_spec`` (the parts of its flat state), if it declares one."""
        return getattr(self.model, "state_spec", None)

    def save(self, path: str | os.PathLike[str], /) -> Any:
        """As :meth:`Policy.save`, with rl8's recurrent MLflow model."""
        from .tracking.rl8_policy_model import pickle_policy

        return pickle_policy(self, path, recurrent=True)


def _steps_as_rows(per_step: list[torch.Tensor]) -> torch.Tensor:
    """``T`` tensors ``[B, ...]`` as ``[B * T, ...]`` rows ordered ``b * T + t``."""
    stacked = torch.stack(per_step, dim=1)
    return stacked.reshape(-1, *stacked.shape[2:])


@contextlib.contextmanager
def _mode(model: nn.Module, *, training: bool) -> Iterator[None]:
    """``model`` in training or eval mode for the block (rl8's sampling modes), then back."""
    was = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(was)


def build_policy(
    observation_spec: Spec, action_spec: Spec, config: Any, default_model_cls: type[Model], *, device: Device = "cpu"
) -> Policy:
    """The policy an algorithm config describes (see :func:`~rl8lite.algorithms.policy.build_model`)
    on ``device``: a :class:`RecurrentPolicy` for a recurrent model, else a :class:`Policy`."""
    model, distribution_cls = build_model(observation_spec, action_spec, config, default_model_cls)
    policy_cls = RecurrentPolicy if isinstance(model, RecurrentModel) else Policy
    return policy_cls(observation_spec, action_spec, model=model, distribution_cls=distribution_cls, device=device)


def __getattr__(name: str) -> Any:
    # rl8's MLflow models live with the rest of MLflow (rl8lite.tracking), imported on use.
    if name in ("MLflowPolicyModel", "MLflowRecurrentPolicyModel"):
        from .tracking import rl8_policy_model

        return getattr(rl8_policy_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
