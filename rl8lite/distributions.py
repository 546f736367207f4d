"""Action distributions of a model's features ``[B, num_inputs]``, unvalidated (checks cost more
than the math): samples ``[B, *action_spec.shape]``, log-probabilities and entropies ``[B, 1]``."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F

from .specs import Bounded, Spec, Unbounded
from .specs import Categorical as CategoricalSpec

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# -1/2 and log sqrt(2 pi) as float64 0-dim CPU tensors (a Python number costs a conversion per
# call; same results in every dtype), normal tensors even if imported under inference mode
with torch.inference_mode(False):
    _CPU_TERMS = tuple(torch.tensor(c, dtype=torch.float64, device="cpu")
                       for c in (-0.5, _LOG_SQRT_2PI))
_SQUASH_EPS = 1e-6  # keeps atanh finite for actions exactly on a bound
_TINY = torch.finfo(torch.float32).tiny
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class Distribution(ABC):
    """An action distribution parameterised by ``features`` ``[B, num_inputs]``, for the
    env's ``action_spec``; ``action_mask`` ``[B, n]`` (bool or 0/1) marks the allowed actions
    of discrete distributions."""

    def __init__(self, features: torch.Tensor, action_spec: Any, /, *,
                 action_mask: torch.Tensor | None = None) -> None:
        self.features = features
        self.action_spec = action_spec
        self.action_mask = action_mask

    @staticmethod
    @abstractmethod
    def num_inputs(action_spec: Spec) -> int:
        """How many features a model must produce for this distribution."""

    @staticmethod
    def default_dist_cls(action_spec: Spec, /) -> type[Distribution]:
        """rl8's name for :func:`default_distribution_cls`."""
        return default_distribution_cls(action_spec)

    @abstractmethod
    def sample(self) -> torch.Tensor:
        """A random action for every batch row."""

    @abstractmethod
    def deterministic_sample(self) -> torch.Tensor:
        """The most likely (or mean) action for every batch row."""

    @abstractmethod
    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of ``actions``, shape ``[B, 1]``."""

    @abstractmethod
    def entropy(self) -> torch.Tensor:
        """Entropy (or an estimate of it), shape ``[B, 1]``."""

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample and its log-probability (fused where a subclass can)."""
        actions = self.sample()
        return actions, self.logp(actions)


class Categorical(Distribution):
    """Categorical over ``action_spec.n`` actions; masked actions get log-probability
    ``finfo.min`` (never sampled, never the deterministic action, no entropy).

    Examples:
        >>> from rl8lite.specs import Categorical as CategoricalSpec
        >>> dist = Categorical(torch.zeros(5, 3), CategoricalSpec(3, shape=[1]))
        >>> dist.sample().shape, dist.logp(dist.sample()).shape
        (torch.Size([5, 1]), torch.Size([5, 1]))
    """

    def __init__(self, features: torch.Tensor, action_spec: Any, /, **kwargs: Any) -> None:
        super().__init__(features, action_spec, **kwargs)
        if self.action_mask is not None:
            lowest = torch.finfo(features.dtype).min
            features = features.masked_fill(~self.action_mask.bool(), lowest)
        self.log_probs = F.log_softmax(features, dim=-1)
        self._action_shape = tuple(action_spec.shape)

    @staticmethod
    def num_inputs(action_spec: Spec) -> int:
        if not isinstance(action_spec, CategoricalSpec):
            raise TypeError("Categorical needs a Categorical action spec, received"
                            f" {action_spec!r}")
        if tuple(action_spec.shape) not in ((), (1,)):
            raise TypeError("Categorical supports action specs of shape [] or [1], received"
                            f" {list(action_spec.shape)}")
        return action_spec.n

    def _shape_actions(self, index: torch.Tensor) -> torch.Tensor:  # index: [B, 1]
        return index if self._action_shape == (1,) else index.squeeze(-1)

    def sample(self) -> torch.Tensor:
        return self.sample_with_logp()[0]

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        # Gumbel-max: argmax(log p - log(-log U)), U ~ Uniform(0, 1), samples p (Maddison et
        # al. 2014), 2.5x faster than torch.multinomial. U is float32 (bf16 has too few values
        # near 0 and 1), >= tiny, so |G| < 17 and a masked log p = finfo.min stays below all.
        log_probs = self.log_probs
        log_probs = log_probs if log_probs.dtype == torch.float32 else log_probs.float()
        uniform = torch.rand_like(log_probs).clamp_min_(_TINY)  # the draws of torch.rand(shape)
        index = (log_probs - uniform.log_().neg_().log_()).argmax(-1, keepdim=True)
        return self._shape_actions(index), self.log_probs.gather(-1, index)

    def deterministic_sample(self) -> torch.Tensor:
        return self._shape_actions(self.log_probs.argmax(-1, keepdim=True))

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, actions.reshape(-1, 1).long())

    def entropy(self) -> torch.Tensor:
        # H = -sum_a p(a) log p(a); masked actions have p = 0 exactly.
        return -(self.log_probs.exp() * self.log_probs).sum(-1, keepdim=True)


class Normal(Distribution):
    """Diagonal Gaussian; features are ``mean ‖ log_std`` (log-std clamped to [-20, 2]), or the
    pair ``(mean, log_std)`` apart, a log-std ``[n]`` then serving every row."""

    def __init__(self, features: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
                 action_spec: Any, /, **kwargs: Any) -> None:
        super().__init__(features, action_spec, **kwargs)
        if isinstance(features, tuple):  # apart: the mean [B, n] and a log-std [n] for every row
            mean, log_std = features
            if mean.dtype != log_std.dtype:  # promoted as their concatenation would be (autocast)
                dtype = torch.promote_types(mean.dtype, log_std.dtype)
                mean, log_std = mean.to(dtype), log_std.to(dtype)
            self.mean, log_std = mean, log_std.expand_as(mean)
        else:
            self.mean, log_std = features.chunk(2, dim=-1)
        self.log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        self._action_shape = (self.mean.shape[0], *action_spec.shape)

    @classmethod
    def num_inputs(cls, action_spec: Spec) -> int:
        continuous = isinstance(action_spec, (Unbounded, Bounded))
        if not (continuous and action_spec.dtype.is_floating_point):
            raise TypeError(f"{cls.__name__} needs a floating-point Unbounded or Bounded action"
                            f" spec, received {action_spec!r}")
        return 2 * max(1, math.prod(action_spec.shape))

    def _gaussian_logp(self, noise: torch.Tensor) -> torch.Tensor:
        # log N(x; mu, sigma) = -((x - mu) / sigma)^2 / 2 - log sigma - log sqrt(2 pi)
        minus_half, log_sqrt_2pi = _CPU_TERMS if noise.is_cpu else (-0.5, _LOG_SQRT_2PI)
        logp = noise.square().mul_(minus_half).sub_(self.log_std).sub_(log_sqrt_2pi)
        return logp.sum(-1, keepdim=True)

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        noise = torch.randn_like(self.mean)
        actions = self.mean + self.log_std.exp() * noise
        return actions.view(self._action_shape), self._gaussian_logp(noise)

    def sample(self) -> torch.Tensor:
        return self.sample_with_logp()[0]

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean.view(self._action_shape)

    def _as_math(self, actions: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(self.mean.dtype, torch.float32)  # bf16 would hit atanh(1)
        return actions.reshape(self.mean.shape).to(dtype)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self._gaussian_logp((self._as_math(actions) - self.mean) * torch.exp(-self.log_std))

    def entropy(self) -> torch.Tensor:
        # H = sum_i (1/2 + log sqrt(2 pi) + log sigma_i)
        return (0.5 + _LOG_SQRT_2PI + self.log_std).sum(-1, keepdim=True)


class SquashedNormal(Normal):
    """Gaussian squashed by ``tanh`` into a :class:`~rl8lite.specs.Bounded` action range:
    ``a = loc + scale * tanh(u)``, ``u ~ N(mean, std)``, with
    ``log p(a) = log N(u) - sum log(scale * (1 - tanh(u)^2))``; the entropy is the one-sample
    estimate ``-log p(a)`` at a fresh reparameterised sample."""

    def __init__(self, features: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
                 action_spec: Any, /, **kwargs: Any) -> None:
        super().__init__(features, action_spec, **kwargs)
        low = action_spec.low.to(self.mean.device, self.mean.dtype).reshape(1, -1)
        high = action_spec.high.to(self.mean.device, self.mean.dtype).reshape(1, -1)
        self.loc, self.scale = (high + low) / 2, (high - low) / 2

    @classmethod
    def num_inputs(cls, action_spec: Spec) -> int:
        if not isinstance(action_spec, Bounded):
            raise TypeError(f"SquashedNormal needs a Bounded action spec, received {action_spec!r}")
        width = action_spec.high - action_spec.low
        if not bool((torch.isfinite(width) & (width > 0)).all()):
            raise ValueError("SquashedNormal needs finite bounds with low < high in every action"
                             f" dimension, received low {action_spec.low.tolist()} and high"
                             f" {action_spec.high.tolist()}: use an Unbounded spec (or"
                             " distribution_cls=Normal) for unbounded actions")
        return super().num_inputs(action_spec)

    def _log_det(self, squashed: torch.Tensor) -> torch.Tensor:
        # log |da/du| = log scale + log(1 - tanh(u)^2)
        log_det = torch.log(self.scale) + torch.log1p(-squashed.square() + _SQUASH_EPS)
        return log_det.sum(-1, keepdim=True)

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        u = self.mean + self.log_std.exp() * torch.randn_like(self.mean)
        actions = (self.loc + self.scale * torch.tanh(u)).view(self._action_shape)
        # Recomputed from the action as the update will: near saturation atanh(tanh(u)) != u
        # in float32, and two formulas would give a ratio != 1 before any parameter moved.
        return actions, self.logp(actions)

    def deterministic_sample(self) -> torch.Tensor:
        return (self.loc + self.scale * torch.tanh(self.mean)).view(self._action_shape)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        squashed = (self._as_math(actions) - self.loc) / self.scale
        squashed = squashed.clamp(-1 + _SQUASH_EPS, 1 - _SQUASH_EPS)
        noise = (torch.atanh(squashed) - self.mean) * torch.exp(-self.log_std)
        return self._gaussian_logp(noise) - self._log_det(squashed)

    def entropy(self) -> torch.Tensor:
        noise = torch.randn_like(self.mean)
        squashed = torch.tanh(self.mean + self.log_std.exp() * noise)
        return -(self._gaussian_logp(noise) - self._log_det(squashed))


def default_distribution_cls(action_spec: Spec) -> type[Distribution]:
    """Categorical for discrete specs, SquashedNormal for bounded, Normal otherwise."""
    if isinstance(action_spec, CategoricalSpec):
        return Categorical
    if isinstance(action_spec, Bounded) and action_spec.dtype.is_floating_point:
        return SquashedNormal
    if isinstance(action_spec, Unbounded) and action_spec.dtype.is_floating_point:
        return Normal
    raise TypeError(f"No default action distribution for action spec {action_spec!r};"
                    " pass distribution_cls=")
