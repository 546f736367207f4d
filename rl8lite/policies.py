"""Policies (rl8's ``rl8.policies``): a model and the action distribution of its features."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from .data import DataKeys, Device
from .distributions import Distribution, Normal, SquashedNormal, default_distribution_cls
from .models import DefaultModel, DefaultRecurrentModel, Model, RecurrentModel
from .models.cnn import default_model_for
from .models.rl8_style import Rl8Model, Rl8RecurrentModel, flat_features, stateless
from .nn.normalization import Observation, ObservationNormalizer
from .specs import Spec
from .views import ViewKind

__all__ = ["Policy", "RecurrentPolicy", "build_policy"]  # and, imported on use, rl8's MLflow models


class Policy(nn.Module):
    """A model and its action distribution (rl8's ``Policy``).

    ``model`` is an instance, else ``model_cls(observation_spec, action_spec, **model_config)``,
    else :attr:`default_model_cls` sized for ``distribution_cls`` (default: the action spec's).
    A recurrent policy's states are one ``[B, state_size]`` tensor (rl8's TensorDict is accepted).
    A ``normalizer`` normalises the observations of every method (the model sees them normalised).

    Examples:
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> env = DiscreteDummyEnv(1)
        >>> policy = Policy(env.observation_spec, env.action_spec)
        >>> batch = TensorDict({DataKeys.OBS: env.observation_spec.rand([8, 4])}, batch_size=[8, 4])
        >>> policy.sample(batch, return_values=True)[DataKeys.VALUES].shape  # at each last step
        torch.Size([8, 1])
        >>> policy.sample(batch, kind="all")[DataKeys.ACTIONS].shape  # at every step
        torch.Size([32, 1])
    """

    default_model_cls: type[Model] = DefaultModel
    #: Whether the default model's Gaussian mean and log-std may reach the distribution apart
    #: (rl8lite's Normal/SquashedNormal, checked per call): sampling then skips their
    #: concatenation and split, a third of a small batch's sample.
    _gaussian_parts = False

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, *,
                 model: nn.Module | None = None, model_cls: Any = None,
                 model_config: dict[str, Any] | None = None,
                 distribution_cls: type[Distribution] | None = None,
                 normalizer: ObservationNormalizer | None = None, device: Device = "cpu") -> None:
        super().__init__()
        if model is not None and model_cls is not None:
            raise ValueError("`model` and `model_cls` are mutually exclusive: pass one of them")
        distribution_cls = distribution_cls or default_distribution_cls(action_spec)
        if model is None:
            model = _build_model(model_cls or self.default_model_cls, model_cls is None,
                                 observation_spec, action_spec, model_config, distribution_cls)
        self.model, self.normalizer, self.distribution_cls = model, normalizer, distribution_cls
        self.observation_spec, self.action_spec = observation_spec, action_spec
        self.model_config = dict(getattr(model, "config", None) or model_config or {})
        self._gaussian_parts = (getattr(type(model), "forward_features", None)
                                is DefaultModel.forward_features
                                and getattr(model, "log_std", None) is not None
                                and type(self).distribution is Policy.distribution)
        network = stateless(model)
        # a plain attribute, not a submodule: the adapter holds the model registered above
        self._adapter = None if network is model else network
        self.to(device)

    @property
    def network(self) -> Any:
        """The model in rl8lite's stateless protocol: :attr:`model`, or its rl8-style adapter."""
        return self.model if self._adapter is None else self._adapter

    #: The device of the policy's parameters (the CPU for a model without any).
    device = Model.device

    @property
    def recurrent(self) -> bool:
        """Whether the model carries a state from one time step to the next."""
        return isinstance(self.model, RecurrentModel)

    @property
    def separable(self) -> bool:
        """Whether the model computes features and values apart (no hooked ``forward``)."""
        model = self.model
        return (getattr(model, "separable", False) is True and not model._forward_hooks
                and not model._forward_pre_hooks and "forward" not in vars(model))

    def normalize(self, obs: Observation) -> Observation:
        """``obs`` as the model sees it: through :attr:`normalizer`, if any."""
        return obs if self.normalizer is None else self.normalizer(obs)

    def distribution(self, features: torch.Tensor, obs: Observation) -> Distribution:
        """The action distribution of ``features``, masked by ``obs``'s action mask if any."""
        mask = obs.get(DataKeys.ACTION_MASK, None) if isinstance(obs, TensorDict) else None
        if isinstance(mask, TensorDict):  # a windowed action mask: the current step's
            mask = mask[DataKeys.INPUTS][:, -1]
        return self.distribution_cls(features, self.action_spec, action_mask=mask)

    def act(self, obs: Observation, *, deterministic: bool = False) -> tuple[torch.Tensor, ...]:
        """``(actions, logp, values)`` for a batch of observations."""
        obs = self.normalize(obs)
        features, values = self.network(obs)
        return (*self._draw(self.distribution(features, obs), deterministic), values)

    def sample_actions(self, obs: Observation, *,
                       deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, logp)``, from the features alone when the model is :attr:`separable`."""
        network, obs = self.network, self.normalize(obs)
        if not self.separable:
            features = network(obs)[0]
        elif self._gaussian_parts and self.distribution_cls in (Normal, SquashedNormal):
            features = network.actor_outputs(obs)
        else:
            features = network.forward_features(obs)
        return self._draw(self.distribution(features, obs), deterministic)

    def _draw(self, dist: Distribution, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if deterministic:
            actions = dist.deterministic_sample()
            logp = dist.logp(actions)
        else:
            actions, logp = dist.sample_with_logp()
        dtype = getattr(self.action_spec, "dtype", None)
        return (actions if dtype is None or actions.dtype == dtype else actions.to(dtype)), logp

    def evaluate(self, obs: Observation, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(logp, entropy, values)`` of given actions, for the PPO update."""
        obs = self.normalize(obs)
        features, values = self.network(obs)
        dist = self.distribution(features, obs)
        return dist.logp(actions), dist.entropy(), values

    def values(self, obs: Observation) -> torch.Tensor:
        """Value estimates ``[B, 1]``."""
        network, obs = self.network, self.normalize(obs)
        return network.forward_values(obs) if self.separable else network(obs)[1]

    def init_states(self, n: int, /) -> torch.Tensor:
        """A recurrent model's initial states ``[n, state_size]`` on the policy's device."""
        return self.network.init_states(n, self.device)

    def act_recurrent(self, obs: Observation, states: torch.Tensor, *,
                      deterministic: bool = False) -> tuple[torch.Tensor, ...]:
        """``(actions, logp, values, next_states)`` for one time step of a recurrent model."""
        obs = self.normalize(obs)
        features, values, next_states = self.network(obs, states)
        return (*self._draw(self.distribution(features, obs), deterministic), values, next_states)

    def evaluate_sequences(self, obs: Observation, actions: torch.Tensor, states: torch.Tensor,
                           resets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Unroll ``[B, L]`` sequences from their initial ``states``; ``(logp, entropy, values)``
        as ``[B * L, 1]``. ``resets[:, j]`` zeroes the state before step ``j``."""
        steps, obs = [], self.normalize(obs)
        for j in range(actions.shape[1]):
            states = states * (~resets[:, j, None]).to(states.dtype)
            features, value, states = self.network(obs[:, j], states)
            dist = self.distribution(features, obs[:, j])
            steps.append((dist.logp(actions[:, j]), dist.entropy(), value))
        return tuple(torch.stack(x, 1).reshape(-1, 1) for x in zip(*steps))

    def forward(self, obs: Any) -> torch.Tensor:  # type: ignore[override]
        """The deterministic action."""
        return self.act(obs, deterministic=True)[0]

    def sample(self, batch: TensorDict, /, *, kind: ViewKind = "last", deterministic: bool = False,
               inplace: bool = False, requires_grad: bool = False, return_actions: bool = True,
               return_logp: bool = False, return_values: bool = False,
               return_views: bool = False) -> TensorDict:
        """Sample the policy on a batch of sequences ``[B, T]`` (rl8's ``Policy.sample``), with
        ``"obs"`` or the model's inputs under ``DataKeys.VIEWS``, at each sequence's last step
        (``kind="last"``: ``B`` rows) or at every step (``"all"``: row ``b * T + t``)."""
        if DataKeys.VIEWS in batch.keys():
            views = batch[DataKeys.VIEWS]
        elif hasattr(self.model, "apply_view_requirements"):
            views = self.model.apply_view_requirements(batch, kind=kind)
        else:
            views = batch[:, -1] if kind == "last" else batch.reshape(-1)
        obs = self.normalize(views[DataKeys.OBS])
        network = self.network
        with _mode(self.model, training=not deterministic), torch.set_grad_enabled(requires_grad):
            if isinstance(network, Rl8Model):
                features_td, values = network.features_and_values(obs)
                features = flat_features(features_td, model_name=network.name)
            else:
                features, values = network(obs)
                features_td = TensorDict({DataKeys.FEATURES: features}, batch_size=[len(features)])
            out = self._outputs(batch, inplace, features_td, features, obs, values, deterministic,
                                return_actions, return_logp, return_values)
            if return_views:
                out[DataKeys.VIEWS] = views
        return out

    def _outputs(self, batch: TensorDict, inplace: bool, features_td: TensorDict,
                 features: torch.Tensor, obs: Any, values: torch.Tensor, deterministic: bool,
                 actions: bool, logp: bool, with_values: bool) -> TensorDict:
        """The output batch of :meth:`sample`: ``batch`` flattened with ``inplace``, else new."""
        out = batch.reshape(-1) if inplace else TensorDict({}, [len(features)], device=batch.device)
        out[DataKeys.FEATURES] = features_td
        if actions:
            dist = self.distribution(features, obs)
            out[DataKeys.ACTIONS] = dist.deterministic_sample() if deterministic else dist.sample()
            if logp:
                out[DataKeys.LOGP] = dist.logp(out[DataKeys.ACTIONS])
        if with_values:
            out[DataKeys.VALUES] = values
        return out

    def save(self, path: str | os.PathLike[str], /) -> Any:
        """Pickle the policy to ``path`` (as rl8) and return rl8's MLflow model serving it."""
        from .tracking.rl8_policy_model import pickle_policy

        return pickle_policy(self, path, recurrent=self.recurrent)


class RecurrentPolicy(Policy):
    """A recurrent model and its action distribution (rl8's ``RecurrentPolicy``)."""

    default_model_cls: type[Model] = DefaultRecurrentModel

    def sample(self, batch: TensorDict, /,  # type: ignore[override]
               states: torch.Tensor | TensorDict | None = None, *, deterministic: bool = False,
               inplace: bool = False, requires_grad: bool = False, return_actions: bool = True,
               return_logp: bool = False,
               return_values: bool = False) -> tuple[TensorDict, torch.Tensor]:
        """Unroll the policy over sequences ``[B, T]`` from ``states`` (``None``: initial
        states); the outputs at every step (row ``b * T + t``) and the states after the last."""
        rows, steps = batch.batch_size[:2]
        states = self.init_states(rows) if states is None else self.flat_states(states)
        obs = self.normalize(batch[DataKeys.OBS])
        per_step = []
        with _mode(self.model, training=not deterministic), torch.set_grad_enabled(requires_grad):
            for t in range(steps):
                *outputs, states = self.network(obs[:, t], states)
                per_step.append(outputs)
            # the features and values at row b * T + t
            flat, values = (torch.stack(x, dim=1).flatten(0, 1) for x in zip(*per_step))
            features_td = TensorDict({DataKeys.FEATURES: flat}, batch_size=[len(flat)])
            out = self._outputs(batch, inplace, features_td, flat, obs.flatten(0, 1), values,
                                deterministic, return_actions, return_logp, return_values)
        return out, states

    def flat_states(self, states: torch.Tensor | TensorDict) -> torch.Tensor:
        """``[B, state_size]`` from a tensor or rl8's state TensorDict."""
        if isinstance(states, torch.Tensor):
            return states
        if isinstance(self.network, Rl8RecurrentModel):
            return self.network.flat_states(states)
        return torch.cat([v.reshape(states.batch_size[0], -1) for v in states.values()], dim=-1)

    @property
    def state_spec(self) -> Any:
        """The model's ``state_spec`` (the parts of its flat state), if it declares one."""
        return getattr(self.model, "state_spec", None)


@contextlib.contextmanager
def _mode(model: nn.Module, *, training: bool) -> Iterator[None]:
    was = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(was)


def _build_model(model_cls: Any, sized: bool, observation_spec: Spec, action_spec: Spec,
                 model_config: dict[str, Any] | None, distribution_cls: type[Distribution],
                 obs_groups: dict[str, list[str]] | None = None) -> Any:
    """``model_cls(observation_spec, action_spec, **model_config)``; a default model (``sized``
    for the features) is the Nature CNN for images and reads the env's ``obs_groups``."""
    sizes: dict[str, Any] = {}
    if sized:
        model_cls = default_model_for(observation_spec, model_cls)
        sizes = {"num_features": distribution_cls.num_inputs(action_spec),
                 "gaussian": issubclass(distribution_cls, Normal)}
        if obs_groups and "obs_groups" not in (model_config or {}):
            sizes["obs_groups"] = obs_groups
    return model_cls(observation_spec, action_spec, **sizes, **(model_config or {}))


def build_policy(observation_spec: Spec, action_spec: Spec, config: Any,
                 default_model_cls: type[Model], *, normalizer: ObservationNormalizer | None = None,
                 device: Device = "cpu", obs_groups: dict[str, list[str]] | None = None) -> Policy:
    """The policy a config describes (a :class:`RecurrentPolicy` for a recurrent model); a default
    model reads ``obs_groups`` (the env's, unless ``model_config`` gives them)."""
    model = config.model
    if model is None:
        distribution_cls = config.distribution_cls or default_distribution_cls(action_spec)
        model = _build_model(config.model_cls or default_model_cls, config.model_cls is None,
                             observation_spec, action_spec, config.model_config, distribution_cls,
                             obs_groups)
    policy_cls = RecurrentPolicy if isinstance(model, RecurrentModel) else Policy
    return policy_cls(observation_spec, action_spec, model=model,
                      distribution_cls=config.distribution_cls, normalizer=normalizer,
                      device=device)


def __getattr__(name: str) -> Any:
    # rl8's MLflow models live with the rest of MLflow (rl8lite.tracking), imported on use
    if name in ("MLflowPolicyModel", "MLflowRecurrentPolicyModel"):
        from .tracking import rl8_policy_model

        return getattr(rl8_policy_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
