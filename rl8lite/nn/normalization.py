"""Observation normalisation: running moments of every float observation leaf."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Spec, spec_leaves

Observation = Tensor | TensorDict
#: Sums a float64 tensor over every training process.
Summer = Callable[[Tensor], Tensor]


def merge_moments(count: Tensor, mean: Tensor, var: Tensor, batch_count: Tensor,
                  batch_mean: Tensor, batch_var: Tensor) -> tuple[Tensor, ...]:
    """Chan et al.'s parallel update of ``(count, mean, var)`` (population variance) with a
    batch's: ``delta = mean_b - mean``, ``M2 = var n + var_b n_b + delta^2 n n_b / (n + n_b)``."""
    total, delta = count + batch_count, batch_mean - mean
    m2 = var * count + batch_var * batch_count + delta.square() * (count * batch_count / total)
    return total, mean + delta * (batch_count / total), m2 / total


class ObservationNormalizer(nn.Module):
    """``clamp((x - mean) / sqrt(var + eps), -clip, clip)`` for every float observation leaf,
    with running moments in float64 (identity until the first :meth:`update`); a ``ValueError``
    for a spec without float leaves. Integer and categorical leaves and the action mask pass
    unchanged; windows of past observations are normalised step by step, their padding kept zero.

    Examples:
        >>> from rl8lite.specs import Unbounded
        >>> normalizer = ObservationNormalizer(Unbounded(2))
        >>> normalizer.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
        >>> normalizer(torch.tensor([[3.0, 30.0]]))
        tensor([[1., 1.]])
    """

    def __init__(self, observation_spec: Spec, *, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        # the action mask is no observation: the policy reads it, the model does not
        leaves = [(path, spec) for path, spec in spec_leaves(observation_spec)
                  if DataKeys.ACTION_MASK not in path]
        floats = {path: spec for path, spec in leaves if spec.dtype.is_floating_point}
        self.paths = list(floats)
        if not self.paths:
            keys = [".".join((DataKeys.OBS, *path)) for path, _ in leaves] or [DataKeys.OBS]
            raise ValueError(f"normalize_observations: the observation has no float entry to"
                             f" normalise (its entries {keys} are integers or categories)")
        self.clip, self.eps = float(clip), eps
        for i, spec in enumerate(floats.values()):
            self.register_buffer(f"count_{i}", torch.zeros((), dtype=torch.float64))
            self.register_buffer(f"mean_{i}", torch.zeros(spec.shape, dtype=torch.float64))
            self.register_buffer(f"var_{i}", torch.ones(spec.shape, dtype=torch.float64))
            # what forward reads, in the observation's dtype: updated in place (captured graphs)
            self.register_buffer(f"shift_{i}", torch.zeros(spec.shape, dtype=spec.dtype))
            self.register_buffer(f"scale_{i}", torch.ones(spec.shape, dtype=spec.dtype))

    def keys(self) -> list[str]:
        """The normalised entries, as ``obs.<key>...`` names."""
        return [".".join((DataKeys.OBS, *path)) for path in self.paths]

    def forward(self, obs: Observation) -> Observation:
        if not isinstance(obs, TensorDict) or self.paths == [()]:
            return self._normalize(obs, 0)
        out = obs.copy()
        for i, path in enumerate(self.paths):
            out.set(path, self._normalize(obs.get(path), i))
        return out

    def _normalize(self, x: Observation, i: int) -> Observation:
        shift, scale = getattr(self, f"shift_{i}"), getattr(self, f"scale_{i}")
        if isinstance(x, TensorDict):  # a window: {INPUTS [B, size, ...], PADDING_MASK [B, size]}
            inputs, padding = x[DataKeys.INPUTS], x[DataKeys.PADDING_MASK]
            normalized = self._normalize(inputs, i)
            mask = padding.reshape(*padding.shape, *[1] * (inputs.dim() - padding.dim()))
            return TensorDict({DataKeys.INPUTS: normalized.masked_fill(mask, 0),
                               DataKeys.PADDING_MASK: padding}, batch_size=x.batch_size)
        return ((x - shift) * scale).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, rows: Observation, sum_over_ranks: Summer | None = None) -> None:
        """Merge the moments of ``rows`` (observations ``[R, ...]``; every rank's when
        ``sum_over_ranks`` sums a float64 tensor over ranks) into the running ones; a
        ``ValueError`` naming the entry, and nothing changed, where a moment is not finite."""
        means = [getattr(self, f"mean_{i}") for i in range(len(self.paths))]
        sizes = [mean.numel() for mean in means]
        xs = [(rows if not path else rows.get(path)).reshape(-1, *mean.shape).double()
              for path, mean in zip(self.paths, means)]
        total = sum_over_ranks or (lambda t: t)
        # two passes (the batch mean, then squared deviations from it): no cancellation
        sums = total(torch.cat([torch.cat([x.new_full((1,), x.shape[0]), x.sum(0).flatten()])
                                for x in xs]))
        batch_stats = [(part[0], part[1:].view(mean.shape) / part[0])
                       for part, mean in zip(sums.split([1 + n for n in sizes]), means)]
        squares = total(torch.cat([(x - batch_mean).square().sum(0).flatten()
                                   for x, (_, batch_mean) in zip(xs, batch_stats)]))
        merged = []
        for i, (key, mean, (n, batch_mean), square) in enumerate(
                zip(self.keys(), means, batch_stats, squares.split(sizes))):
            batch_var = square.view(mean.shape) / n
            state = (getattr(self, f"count_{i}"), mean, getattr(self, f"var_{i}"))
            merged.append((state, merge_moments(*state, n, batch_mean, batch_var)))
            if not all(bool(m.isfinite().all()) for m in merged[-1][1]):
                raise ValueError(f"observation normalisation: the running moments of {key} are"
                                 " not finite (an observation too large to square in float64)")
        for i, (state, values) in enumerate(merged):
            for target, value in zip(state, values):
                target.copy_(value)
            getattr(self, f"shift_{i}").copy_(values[1])
            getattr(self, f"scale_{i}").copy_((values[2] + self.eps).rsqrt())
