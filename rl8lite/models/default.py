"""The default model: separate actor and critic MLPs over the (concatenated) vector observation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..specs import Composite, Spec, TensorSpec
from .base import Model


class InplaceTanh(nn.Tanh):
    """``tanh`` written over its input: tanh's backward needs only its output, and a linear
    layer's output is read by nothing else, so one activation-sized buffer less per layer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.tanh_()


_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "tanh": InplaceTanh,
    "relu": lambda: nn.ReLU(inplace=True),
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}


def _vector_entries(spec: Spec) -> list[tuple[str, TensorSpec]]:
    """The (key, spec) leaves a default model concatenates, in a fixed order."""
    if isinstance(spec, Composite):
        entries = []
        for key in sorted(spec):
            if key != DataKeys.ACTION_MASK:
                entries.extend((f"{key}.{k}" if k else key, s) for k, s in _vector_entries(spec[key]))
        return entries
    if len(spec.shape) > 1:
        raise TypeError(
            f"The default model takes vector observations; received shape {list(spec.shape)}."
            " Pass model_cls= for images or other structured observations."
        )
    return [("", spec)]


def flat_obs_size(spec: Spec) -> int:
    """Width of the vector :func:`flatten_obs` makes from one observation."""
    return sum(max(1, math.prod(s.shape)) for _, s in _vector_entries(spec))


def flatten_obs(obs: torch.Tensor | TensorDict, spec: Spec) -> torch.Tensor:
    """The vector entries of a (composite) observation concatenated into ``[B, D]`` floats."""
    if not isinstance(spec, Composite):
        if obs.dim() != 2:
            obs = obs.reshape(obs.shape[0], -1)
        return obs if obs.dtype == torch.float32 else obs.float()
    parts = [obs.get(tuple(key.split("."))) for key, _ in _vector_entries(spec)]
    return torch.cat([p.reshape(p.shape[0], -1).float() for p in parts], dim=-1)


class Linear(nn.Linear):
    """``nn.Linear`` whose weight gradient is ``x^T g``, not ``g^T x``, where the layer widens
    (``in < out``) on a CPU: MKL computes the narrow ``[out, B] @ [B, in]`` product 5-8x below
    its usual rate (``benchmarks/README.md``). Multiplying by a contiguous copy of ``W^T`` turns
    the backward around; the copy is ``in * out`` floats. Same parameters, same math."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # grad mode first: exports and collects (no autograd) never test the batch size
        if (torch.is_grad_enabled() and self.weight.requires_grad and x.device.type == "cpu"
                and self.in_features < self.out_features and x.dim() == 2 and x.shape[0] >= 64):
            weight_t = self.weight.t().contiguous()
            return x @ weight_t if self.bias is None else torch.addmm(self.bias, x, weight_t)
        return F.linear(x, self.weight, self.bias)


class HooklessSequential(nn.Sequential):
    """An ``nn.Sequential`` that calls its layers' ``forward`` directly, skipping each layer's
    hook dispatch (a quarter of a small batch's forward time on a CPU). Hooks on the sequence
    itself still run, hooks on its layers do not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for layer in self:
            x = layer.forward(x)
        return x


def mlp(in_features: int, hiddens: Sequence[int], out_features: int, activation: str,
        out_gain: float) -> HooklessSequential:
    """An MLP with orthogonal init (gain sqrt(2) inside, ``out_gain`` on the head), zero biases."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, received {activation!r}")
    layers: list[nn.Module] = []
    widths = [in_features, *hiddens, out_features]
    for i, (width, out) in enumerate(itertools.pairwise(widths)):
        linear = Linear(width, out)
        nn.init.orthogonal_(linear.weight, out_gain if i == len(hiddens) else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if i < len(hiddens):
            layers.append(_ACTIVATIONS[activation]())
    return HooklessSequential(*layers)


class DefaultModel(Model):
    """Separate actor and critic MLPs over the (concatenated) vector observation.

    For Gaussian distributions a learned, state-independent log-std follows the actor's
    means: the features are ``mean ‖ log_std``.

    Args:
        observation_spec: The env's observation spec (vector, or a Composite of vectors).
        action_spec: The env's action spec.
        num_features: Features the action distribution needs.
        gaussian: Whether the features are ``mean ‖ log_std``.
        hiddens: Hidden layer widths of each MLP.
        activation: ``"tanh"``, ``"relu"``, ``"elu"``, ``"gelu"`` or ``"silu"``.
        init_log_std: Initial log-std for Gaussian distributions.
    """

    separable = True

    def __init__(
        self,
        observation_spec: Spec,
        action_spec: Spec,
        /,
        *,
        num_features: int,
        gaussian: bool = False,
        hiddens: Sequence[int] = (64, 64),
        activation: str = "tanh",
        init_log_std: float = 0.0,
    ) -> None:
        super().__init__(observation_spec, action_spec, num_features=num_features, gaussian=gaussian,
                         hiddens=list(hiddens), activation=activation, init_log_std=init_log_std)
        in_features = flat_obs_size(observation_spec)
        actor_outputs = num_features // 2 if gaussian else num_features
        self.actor = mlp(in_features, hiddens, actor_outputs, activation, out_gain=0.01)
        self.critic = mlp(in_features, hiddens, 1, activation, out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((actor_outputs,), float(init_log_std))) if gaussian else None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass overriding forward may couple actor and critic: separable only if it says so.
        if "forward" in vars(cls) and "separable" not in vars(cls):
            cls.separable = False

    def forward(self, obs: torch.Tensor | TensorDict) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        x = flatten_obs(obs, self.observation_spec)
        return self._features(x), self.critic(x)

    def forward_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self._features(flatten_obs(obs, self.observation_spec))

    def forward_values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self.critic(flatten_obs(obs, self.observation_spec))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        features = self.actor(x)
        if self.log_std is not None:
            features = torch.cat([features, self.log_std.expand_as(features)], dim=-1)
        return features
