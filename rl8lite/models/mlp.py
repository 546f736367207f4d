"""The default model: separate actor and critic MLPs over vector observations."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..specs import Composite, Spec, TensorSpec
from ._base import Model


#: How float32 CPU tensors get tanh: ``"sigmoid"`` (:func:`_tanh_via_sigmoid_`) or torch's
#: ``"tanh"``; ``None`` until the first use decides (:func:`cpu_tanh_formula`).
_cpu_tanh: str | None = None
_TANH_ENV_VAR = "RL8LITE_CPU_TANH"
_ONE = torch.tensor(1.0, device="cpu")


def _tanh_via_sigmoid_(x: torch.Tensor) -> torch.Tensor:
    """``tanh(x) = 2 sigmoid(2x) - 1``, written over ``x`` (``x + x`` is ``2x`` exactly, and
    costs no Python scalar's conversion: half the time of ``mul_(2.0)`` on small tensors)."""
    x.add_(x).sigmoid_()
    return x.add_(x).sub_(_ONE)


#: What :func:`_measure_cpu_tanh` times, by formula name.
_KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.Tensor.tanh_,
    "sigmoid": _tanh_via_sigmoid_,
}


def _faster_formula(tanh_seconds: float, sigmoid_seconds: float) -> str:
    """``"sigmoid"`` where torch's tanh takes over 1.3x the formula's time, else ``"tanh"``."""
    return "sigmoid" if tanh_seconds > 1.3 * sigmoid_seconds else "tanh"


def _measure_cpu_tanh() -> str:
    """The faster of the two on this CPU: float32, one 4096 x 64 tensor, one thread, best of 5.

    torch's CPU tanh runs through MKL's vector math, whose speed depends on the CPU: 3.7x
    slower than ``sigmoid`` on an AMD EPYC with AVX2 (1.8 vs 0.49 ms for 8192 x 64), 0.5x
    the formula's time on an Intel Xeon with AVX512. The formula's three extra passes are
    worth it only where tanh is that slow. One thread, whatever torch's setting, so that
    the choice does not depend on it; the 1.3x margin keeps it stable on a noisy machine.
    """
    # Its own generator and an explicit device: deciding must not move the global RNG that
    # seeded runs depend on, nor follow a default device set by the caller (meta, cuda).
    generator = torch.Generator(device="cpu").manual_seed(0)
    source = torch.randn(4096, 64, generator=generator, device="cpu", dtype=torch.float32)
    work = torch.empty_like(source)
    best = {name: float("inf") for name in _KERNELS}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for _ in range(5):
                for name, kernel in _KERNELS.items():
                    work.copy_(source)
                    start = time.perf_counter()
                    kernel(work)
                    best[name] = min(best[name], time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return _faster_formula(best["tanh"], best["sigmoid"])


def cpu_tanh_formula() -> str:
    """How the default model computes tanh on float32 CPU tensors in this process:
    ``"sigmoid"`` (``2 sigmoid(2x) - 1``, within 2e-7 of tanh) where torch's tanh kernel is
    slow, else ``"tanh"``. Decided once, at first use, by timing both (a few ms), or set by
    the ``RL8LITE_CPU_TANH`` environment variable (``sigmoid`` or ``tanh``) to make runs on
    different CPUs compute the same formula.

    Raises:
        ValueError: ``RL8LITE_CPU_TANH`` is set to something else.
    """
    global _cpu_tanh
    if _cpu_tanh is None:
        chosen = os.environ.get(_TANH_ENV_VAR, "").strip().lower()
        if chosen and chosen not in ("sigmoid", "tanh"):
            raise ValueError(f"{_TANH_ENV_VAR} must be 'sigmoid' or 'tanh', received {chosen!r}")
        _cpu_tanh = chosen or _measure_cpu_tanh()
    return _cpu_tanh


class _SigmoidTanh(torch.autograd.Function):
    """:func:`_tanh_via_sigmoid_` with tanh's own backward, ``grad * (1 - y^2)`` (one pass
    over the saved output, as ``x.tanh_()`` has)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = _tanh_via_sigmoid_(x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class InplaceTanh(nn.Tanh):
    """``tanh`` written over its input (autograd's tanh backward needs only the output); in
    float32 on CPU computed through ``sigmoid`` where that is faster (:func:`cpu_tanh_formula`)."""

    def __init__(self) -> None:
        super().__init__()
        cpu_tanh_formula()  # decided when the model is built, never while it is traced or compiled

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        cpu_tanh_formula()  # unpickled (torch.load, deepcopy, spawned workers): decided here too

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # bf16/fp16 (autocast) keep torch's tanh: 2 sigmoid(2x) - 1 loses their few bits near 0.
        if x.device.type != "cpu" or x.dtype != torch.float32:
            return x.tanh_()
        if torch.compiler.is_compiling():  # torch.compile / torch.export: out of place, fused by inductor
            if _cpu_tanh == "sigmoid":  # read as decided at build time: tracing never times kernels
                return torch.sigmoid(x + x) * 2.0 - 1.0
            return x.tanh_()
        if cpu_tanh_formula() == "tanh":
            return x.tanh_()
        if x.requires_grad and torch.is_grad_enabled():
            return _SigmoidTanh.apply(x)
        return _tanh_via_sigmoid_(x)


# ReLU and tanh overwrite the linear layer's output, which nothing else reads (a linear
# layer's backward needs its input, not its output): one activation-sized buffer less
# per layer, and ~7% faster forward/backward at 2048 rows (2x256 MLPs, one core).
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
            if key == DataKeys.ACTION_MASK:
                continue
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
    """Concatenate the vector entries of a (composite) observation into ``[B, D]`` floats."""
    if not isinstance(spec, Composite):
        if obs.dim() != 2:  # scalar observations [B] become [B, 1], tensors [B, ...] rows
            obs = obs.reshape(obs.shape[0], -1)
        return obs if obs.dtype == torch.float32 else obs.float()
    parts = []
    for key, _ in _vector_entries(spec):
        value = obs.get(tuple(key.split(".")))
        parts.append(value.reshape(value.shape[0], -1).float())
    return torch.cat(parts, dim=-1)


#: Rows from which :class:`Linear` computes a widening layer's weight gradient as ``x^T g``.
_TRANSPOSED_GRAD_MIN_ROWS = 64


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same math) whose backward is faster where the
    layer widens (``in_features < out_features``, e.g. an MLP's first layer).

    ``F.linear`` multiplies by the transposed view of the ``[out, in]`` weight, and
    its backward then computes the weight gradient as ``g^T x`` (``[out, B] @ [B, in]``),
    a product whose narrow output (``in`` columns) MKL runs 5-8x below its usual
    rate: 1.4 ms against 0.18 ms at 2048 rows for a 5 -> 256 layer on one core.
    Multiplying by a contiguous copy of ``W^T`` instead makes the backward compute
    ``x^T g`` (``[in, B] @ [B, out]``); the copy is ``in * out`` elements. Below
    ``_TRANSPOSED_GRAD_MIN_ROWS`` rows, and without autograd, the plain path is
    as fast or faster.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Grad mode first: exports and collects (no autograd) never test the batch size.
        if (
            torch.is_grad_enabled()
            and self.weight.requires_grad
            and self.in_features < self.out_features
            and x.dim() == 2
            and x.shape[0] >= _TRANSPOSED_GRAD_MIN_ROWS
        ):
            weight_t = self.weight.t().contiguous()
            if self.bias is None:
                return x @ weight_t
            return torch.addmm(self.bias, x, weight_t)
        return F.linear(x, self.weight, self.bias)


class MLP(nn.Sequential):
    """An ``nn.Sequential`` of linear layers and activations whose forward skips
    each layer's ``__call__`` (hook dispatch): ~25% of a small batch's forward
    time on CPU (8 rows, 2x256 layers). Hooks on the MLP itself still run; hooks
    on its layers (and hook-based tools such as ``torch.nn.utils.prune`` or the
    old ``spectral_norm`` applied to a layer) do not: wrap the layers in a plain
    ``nn.Sequential`` in a custom model for those."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for layer in self:
            x = layer.forward(x)
        return x


def mlp(
    in_features: int, hiddens: Sequence[int], out_features: int, activation: str, out_gain: float
) -> MLP:
    """An MLP with orthogonal init (gain sqrt(2) inside, ``out_gain`` on the head)."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, received {activation!r}")
    layers: list[nn.Module] = []
    width = in_features
    for hidden in hiddens:
        linear = Linear(width, hidden)
        nn.init.orthogonal_(linear.weight, math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, _ACTIVATIONS[activation]()]
        width = hidden
    head = Linear(width, out_features)
    nn.init.orthogonal_(head.weight, out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return MLP(*layers)


class DefaultModel(Model):
    """Separate actor and critic MLPs over the (concatenated) vector observation.

    For Gaussian distributions the actor head gives the means and a learned,
    state-independent log-std is appended, so the features are ``mean ‖ log_std``.

    Args:
        observation_spec: The env's observation spec (vector, or a Composite of vectors).
        action_spec: The env's action spec.
        num_features: Features the action distribution needs.
        gaussian: Whether the features are ``mean ‖ log_std`` (adds the log-std parameter).
        hiddens: Hidden layer widths of each MLP.
        activation: ``"tanh"``, ``"relu"``, ``"elu"``, ``"gelu"`` or ``"silu"``.
        init_log_std: Initial log-std for Gaussian distributions.
    """

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
        super().__init__(
            observation_spec,
            action_spec,
            num_features=num_features,
            gaussian=gaussian,
            hiddens=list(hiddens),
            activation=activation,
            init_log_std=init_log_std,
        )
        in_features = flat_obs_size(observation_spec)
        actor_outputs = num_features // 2 if gaussian else num_features
        self.actor = mlp(in_features, hiddens, actor_outputs, activation, out_gain=0.01)
        self.critic = mlp(in_features, hiddens, 1, activation, out_gain=1.0)
        self.log_std = (
            nn.Parameter(torch.full((actor_outputs,), float(init_log_std))) if gaussian else None
        )

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor | TensorDict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = flatten_obs(obs, self.observation_spec)
        return self._features(x), self.critic(x)

    separable = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass that overrides forward may couple the actor and the critic: it is
        # separable only if it says so.
        if "forward" in vars(cls) and "separable" not in vars(cls):
            cls.separable = False

    def forward_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self._features(flatten_obs(obs, self.observation_spec))

    def forward_values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self.critic(flatten_obs(obs, self.observation_spec))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        features = self.actor(x)
        if self.log_std is not None:
            features = torch.cat([features, self.log_std.expand_as(features)], dim=-1)
        return features
