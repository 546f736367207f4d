"""PPO over several processes: whole-batch statistics and gradients over every rank, so ``K``
ranks of ``N`` copies make the update of one process of ``K * N`` copies."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..nn.ppo import normalization
from ..runtime.distributed import DistributedError, Ranks
from ..runtime.imports import qualified_name

Pair = tuple[torch.Tensor, torch.Tensor]


def check_same_config(ranks: Ranks, config: Any, env_cls: type) -> None:
    """Raise a ``DistributedError`` naming each config field (compared as text) ranks differ in."""
    fingerprint = {"env_cls": qualified_name(env_cls)}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, type):
            value = qualified_name(value)
        elif isinstance(value, torch.nn.Module):
            value = f"{qualified_name(value)}({getattr(value, 'config', '')})"
        fingerprint[f.name] = repr(value)
    prints = ranks.all_gather_object(fingerprint)
    differing = sorted(k for k in prints[0] if any(p.get(k) != prints[0][k] for p in prints[1:]))
    if differing:
        by_rank = lambda k: ", ".join(f"rank {r} {p.get(k)}" for r, p in enumerate(prints))
        details = "; ".join(f"{k}: {by_rank(k)}" for k in differing)
        raise DistributedError(f"the ranks were given different configs ({details}); every process"
                               " must be built with the same config (num_envs is per process)")


def broadcast_module_(module: torch.nn.Module, ranks: Ranks) -> None:
    """Make every rank's parameters and buffers rank 0's (one broadcast)."""
    tensors = [t for t in module.state_dict().values() if t.is_floating_point()]
    if not ranks.distributed or not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
    ranks.broadcast_(flat)
    with torch.no_grad():
        for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
            t.copy_(part.view_as(t))


def pooled_mean_var(x: torch.Tensor, ranks: Ranks, *, correction: int) -> Pair:
    """Mean and variance of every element of ``x`` on every rank, from float64 sums."""
    x64 = x.double()
    n, total, squares = ranks.sum([x.numel(), x64.sum(), x64.square().sum()], device=x.device)
    mean = total / n
    var = (squares - n * mean * mean).clamp(min=0) / (n - correction)
    return mean.to(x.dtype), var.to(x.dtype)


class GradientAverager:
    """Averages gradients (and sums the step's loss) over ranks in one all-reduce per step."""

    def __init__(self, params: list[torch.nn.Parameter], ranks: Ranks) -> None:
        self.params, self.ranks = params, ranks
        self.sizes = [p.numel() for p in params]
        self.flat = torch.empty(sum(self.sizes) + 1, dtype=params[0].dtype, device=params[0].device)

    def __call__(self, loss: torch.Tensor) -> torch.Tensor:
        """Average every gradient over ranks (a missing one as zeros); return the summed loss."""
        params = self.params
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = self.flat
        torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1).to(flat.dtype)],
                  out=flat)
        self.ranks.all_reduce_(flat, "sum")
        grads = flat[:-1].div_(self.ranks.world_size)
        for p, part in zip(params, grads.split(self.sizes)):
            p.grad.copy_(part.view_as(p.grad))
        return flat[-1]


def union_std(mean: torch.Tensor, second_moment: torch.Tensor) -> torch.Tensor:
    """Population std of a union of equally sized groups, from its mean and its ``E[x^2]`` (the
    mean of each group's ``std^2 + mean^2``): ``sqrt(E[x^2] - E[x]^2)``."""
    return (second_moment - mean.square()).clamp(min=0).sqrt()


def pool_collect_stats(values: dict[str, torch.Tensor], ranks: Ranks) -> dict[str, torch.Tensor]:
    """A collect's statistics over every rank (means average, stds pool, counts add)."""
    pooled, world = dict(values), ranks.world_size
    spread = [p for p in ("returns", "rewards") if f"{p}/mean" in values]
    moments = [(values[f"{p}/mean"], values[f"{p}/std"]) for p in spread]
    counts = [k for k in values if k.endswith("/count")]
    summed = ranks.sum([x for mean, std in moments for x in (mean, std.square() + mean.square())]
                       + [values[k] for k in counts], device=next(iter(values.values())).device)
    for i, prefix in enumerate(spread):
        mean = summed[2 * i] / world
        pooled[f"{prefix}/mean"] = mean
        pooled[f"{prefix}/std"] = union_std(mean, summed[2 * i + 1] / world)
    pooled.update(zip(counts, summed[2 * len(spread):]))
    # min x = -max(-x): one all-reduce for both
    signs = {k: -1.0 if k.endswith("/min") else 1.0 for k in values if k.endswith(("/min", "/max"))}
    extremes = torch.stack([sign * values[k].double() for k, sign in signs.items()])
    ranks.all_reduce_(extremes, "max")
    pooled.update({k: sign * x for (k, sign), x in zip(signs.items(), extremes)})
    return pooled


class WholeBatch:
    """Statistics of the whole batch: this process's samples, or every rank's when distributed."""

    def __init__(self, ranks: Ranks | None = None) -> None:
        self.ranks = ranks or Ranks()

    def normalization(self, x: torch.Tensor, eps: float = 1e-8) -> Pair:
        """``(mean, std + eps)`` (unbiased std), as :func:`rl8lite.nn.ppo.normalization`."""
        if not self.ranks.distributed:
            return normalization(x, eps)
        mean, var = pooled_mean_var(x, self.ranks, correction=1)
        return mean, var.sqrt() + eps

    def var(self, x: torch.Tensor) -> torch.Tensor:
        """Unbiased variance of every element."""
        if not self.ranks.distributed:
            return x.var()
        return pooled_mean_var(x, self.ranks, correction=1)[1]

    def population_std(self, x: torch.Tensor) -> torch.Tensor:
        if not self.ranks.distributed:
            return x.std(correction=0)
        return pooled_mean_var(x, self.ranks, correction=0)[1].sqrt()

    def sums(self, values: list[float]) -> list[float]:
        return values if not self.ranks.distributed else self.ranks.sum(values).tolist()

    def sums_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """A float64 tensor summed over ranks (in place)."""
        return self.ranks.all_reduce_(values, "sum")

    def extremes(self, x: torch.Tensor) -> tuple[float, float]:
        """``(min, max)`` of every rank's ``x`` (an empty ``x`` counts for nothing)."""
        inf = torch.tensor(float("inf"), dtype=torch.float64, device=x.device)
        low, high = (x.min(), x.max()) if x.numel() else (inf, -inf)
        low, high = self.ranks.all_reduce_(torch.stack([-low, high]).double(), "max").tolist()
        return -low, high
