"""CUDA graphs of the collect and the update's minibatch step: run once, captured, then replayed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .compiled_step import ADAMS
from .config import ConfigError


def graphs_unsupported(hparams: Any, device: torch.device, recurrent: bool, windowed: bool,
                       distributed: bool, collect_chunk: int | None) -> str | None:
    """Why the collect and update run eagerly, or ``None``; a :class:`ConfigError` if forced."""
    if hparams.cuda_graphs is False:
        return "cuda_graphs=False"
    reasons = {
        "not a CUDA device": device.type != "cuda",
        "a recurrent policy": recurrent,
        "a policy with view windows": windowed,
        "an optimizer other than Adam/AdamW": hparams.optimizer_cls not in ADAMS,
        "mixed precision": hparams.enable_amp,
        "several processes": distributed,
        "collect chunks": collect_chunk is not None,
    }
    reason = next((reason for reason, applies in reasons.items() if applies), None)
    if reason is not None and hparams.cuda_graphs is True:
        raise ConfigError(f"cuda_graphs=True, but the collect and update cannot be captured with"
                          f" {reason}")
    return reason


def capturable_optimizer_kwargs(kwargs: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Adam/AdamW keywords for a captured step: fused, capturable, lr a tensor schedules fill."""
    lr = kwargs.get("lr", 1e-3)
    return {**kwargs, "fused": True, "capturable": True, "foreach": None,
            "lr": torch.tensor(float(lr), device=device)}


def _capture(fn: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph, outputs


class GraphedStep:
    """The update's minibatch step as one graph per minibatch size."""

    def __init__(self, step: Callable[..., torch.Tensor],
                 before_capture: Callable[[], None]) -> None:
        self.step, self.before_capture = step, before_capture
        self.seen: set[int] = set()
        self.graphs: dict[int, tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def forget(self) -> None:
        """Drop the graphs (the optimizer's state tensors were replaced): eager, then captured."""
        self.seen.clear()
        self.graphs.clear()

    def __call__(self, batch: Any, units: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        size = units.shape[0]
        if size not in self.graphs:
            if size not in self.seen:
                self.seen.add(size)
                return self.step(batch, units, row)
            static_units, static_row = units.clone(), row.clone()
            self.before_capture()
            graph, norm = _capture(lambda: self.step(batch, static_units, static_row))
            self.graphs[size] = (graph, static_units, static_row, norm)
        graph, static_units, static_row, norm = self.graphs[size]
        static_units.copy_(units)
        graph.replay()
        row.copy_(static_row)
        return norm.clone()


class GraphedSampling:
    """The policy's sampling step as one graph per ``deterministic`` (returns copies)."""

    def __init__(self, sample: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.sample = sample
        self.seen: set[bool] = set()
        self.graphs: dict[bool, tuple[Any, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = {}

    def forget(self) -> None:
        self.seen.clear()
        self.graphs.clear()

    def __call__(self, obs: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if deterministic not in self.graphs:
            if deterministic not in self.seen:
                self.seen.add(deterministic)
                return self.sample(obs, deterministic=deterministic)
            static_obs = obs.clone()
            graph, outputs = _capture(lambda: self.sample(static_obs, deterministic=deterministic))
            self.graphs[deterministic] = (graph, static_obs, outputs)
        graph, static_obs, (actions, logp) = self.graphs[deterministic]
        static_obs.copy_(obs)
        graph.replay()
        return actions.clone(), logp.clone()


class GraphedRollout:
    """A collect's whole time loop as one graph per key, for an env whose step is capturable."""

    def __init__(self, steps: Callable[[Any], Any]) -> None:
        self.steps = steps
        self.graphs: dict[Any, torch.cuda.CUDAGraph] = {}

    def forget(self) -> None:
        self.graphs.clear()

    def __call__(self, key: Any) -> None:
        if key not in self.graphs:
            self.graphs[key] = _capture(lambda: self.steps(key))[0]
        self.graphs[key].replay()
