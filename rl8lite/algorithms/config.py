"""``AlgorithmConfig``: every PPO hyperparameter, documented once, validated in one place."""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from ..data import Device
from ..distributions import Distribution
from ..runtime.distributed import resolve_device
from ..schedulers import Schedule, ScheduleKind, validate_schedule


class ConfigError(ValueError):
    """A hyperparameter is out of range; the message names it and the valid range."""


@dataclass
class AlgorithmConfig:
    """Hyperparameters of PPO (rl8's field names and meanings).

    Examples:
        >>> from rl8lite import AlgorithmConfig
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> algo = AlgorithmConfig(num_envs=16, horizon=8, seed=0).build(DiscreteDummyEnv)
        >>> algo.buffer.batch_size
        torch.Size([16, 9])
    """

    #: Algorithm class :meth:`build` makes (set by :mod:`rl8lite.algorithms.algorithm`).
    algorithm_cls: ClassVar[Callable[..., Any]]

    #: Env copies simulated in parallel (``>= 1``; capped by ``Env.max_num_envs``).
    num_envs: int = 256
    #: Env steps per copy in each collect (``>= 1``). The buffer is ``[num_envs, horizon + 1]``.
    horizon: int = 32
    #: Reset the env every this many collects (``> 0``), or only at the first (``< 0``); ``None``:
    #: ``-1`` for an env that reports episode ends, else 1 (rl8's default).
    horizons_per_env_reset: int | None = None
    #: Initial env parameters passed to the env class at construction.
    env_config: dict[str, Any] | None = None
    #: Discount factor in ``(0, 1]``.
    gamma: float = 0.99
    #: GAE lambda in ``[0, 1]``: lower trades variance for bias.
    gae_lambda: float = 0.95
    #: PPO ratio clip ``eps`` in ``(0, 1)``.
    clip_param: float = 0.2
    #: Value loss: ``"squared"`` (``(V - R)^2 / 2``) or rl8's ``"smooth_l1"``.
    vf_loss: Literal["squared", "smooth_l1"] = "squared"
    #: Clip of the value update around the old values (``"smooth_l1"``: cap on each sample's
    #: loss, rl8's default 5), or ``None``.
    vf_clip_param: float | None = None
    #: Dual-clip constant ``c > 1`` for negative advantages, or ``None``.
    dual_clip_param: float | None = None
    #: Weight of the value loss (``>= 0``).
    vf_coeff: float = 0.5
    #: Weight of the entropy bonus (``>= 0``); ignored when a schedule is given.
    entropy_coeff: float = 0.0
    #: ``[(env_steps, coeff), ...]`` schedule of the entropy coefficient.
    entropy_coeff_schedule: Schedule | None = None
    #: ``"step"`` or ``"interp"``.
    entropy_coeff_schedule_kind: ScheduleKind = "step"
    #: ``[(env_steps, lr), ...]`` schedule of the learning rate.
    lr_schedule: Schedule | None = None
    #: ``"step"`` or ``"interp"``.
    lr_schedule_kind: ScheduleKind = "step"
    #: Optimizer class (default Adam, fused).
    optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam
    #: Keyword arguments of the optimizer (default ``{"lr": 3e-4}``); numbers must be finite.
    optimizer_config: dict[str, Any] | None = None
    #: Samples per minibatch (``1..num_envs * horizon``); ``None`` is the whole buffer.
    sgd_minibatch_size: int | None = None
    #: Passes over the buffer per ``step`` (``>= 1``).
    num_sgd_iters: int = 4
    #: Shuffle the buffer into new minibatches every pass (a pass of one step draws none).
    shuffle_minibatches: bool = True
    #: Stop a ``step``'s passes once a pass's mean approximate KL exceeds ``1.5 * target_kl_div``.
    target_kl_div: float | None = None
    #: rsl_rl's adaptive learning rate: after each optimizer step, divided by 1.5 where its
    #: minibatch's approximate KL exceeds ``2 desired_kl``, times 1.5 below half (excludes
    #: ``lr_schedule``; a host read per step).
    desired_kl: float | None = None
    #: Clip the global gradient norm to this (``> 0``), or ``None``.
    max_grad_norm: float | None = 1.0
    #: Normalise advantages by the buffer's mean and std.
    normalize_advantages: bool = True
    #: Divide rewards by the std of their running discounted sums (as in rl8).
    normalize_rewards: bool = True
    #: Normalise every float observation entry by its running mean and variance (float64, pooled
    #: over ranks, updated after each ``step``), in the policy: checkpointed and exported with it.
    normalize_observations: bool = False
    #: Normalised observations are clipped to ``[-observation_clip, observation_clip]`` (``> 0``).
    observation_clip: float = 10.0
    #: Accumulate gradients over a pass's minibatches and step once per pass.
    accumulate_grads: bool = False
    #: Mixed precision in the update: fp16 with a grad scaler on CUDA, bf16 on CPU.
    enable_amp: bool = False
    #: Most samples per forward/backward of the update (the same step); ``"auto"``: about 2**21
    #: activation floats on CPU, no chunks elsewhere.
    update_chunk_size: int | Literal["auto"] | None = "auto"
    #: Most copies in one policy forward while collecting. ``"auto"``: as ``update_chunk_size``
    #: on CPU, all copies elsewhere. Another chunking draws other random numbers.
    collect_chunk_size: int | Literal["auto"] | None = "auto"
    #: Make glibc's malloc keep freed memory for reuse (CPU; process-wide and not undone).
    tune_malloc: bool = False
    #: ``torch.compile`` the update's minibatch step. ``True``: whole as one graph on a CPU where
    #: supported (feedforward, Adam/AdamW, no AMP, one process), else the loss (and sampling off the
    #: CPU); ``"auto"``: whole on a CPU where supported, once 20,000 optimizer steps are planned.
    compile: bool | Literal["auto"] = "auto"
    #: Capture the collect and the update's minibatch step as CUDA graphs: ``True``, ``False`` or
    #: ``"auto"``: where supported (feedforward, no view windows, Adam/AdamW, no AMP, one process).
    cuda_graphs: bool | Literal["auto"] = "auto"
    #: A ready model instance (excludes ``model_cls``/``model_config``).
    model: torch.nn.Module | None = None
    #: Model class built as ``model_cls(obs_spec, action_spec, **model_config)``.
    model_cls: Callable[..., Any] | None = None
    #: Keyword arguments of the model (default model: ``hiddens``, ``activation``, ...).
    model_config: dict[str, Any] | None = None
    #: Action distribution class; default from the action spec.
    distribution_cls: type[Distribution] | None = None
    #: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or a device.
    device: Device = "auto"
    #: Seed of python's, numpy's and torch's RNGs (``None``: not seeded).
    seed: int | None = None

    def validate(self) -> AlgorithmConfig:
        """Check every range; raise :class:`ConfigError` naming the field. Returns ``self``."""
        check_int("num_envs", self.num_envs, minimum=1)
        check_int("horizon", self.horizon, minimum=1)
        check_int("horizons_per_env_reset", self.horizons_per_env_reset, optional=True)
        if self.horizons_per_env_reset == 0:
            raise ConfigError("horizons_per_env_reset must be > 0 (reset every k collects) or < 0"
                              " (reset once), received 0")
        for name, interval in _FLOAT_RANGES.items():
            if interval.endswith(" or None") and getattr(self, name) == math.inf:
                setattr(self, name, None)  # "no limit", as None says
            check_float(name, getattr(self, name), interval)
        if self.vf_loss not in ("squared", "smooth_l1"):
            raise ConfigError(f"vf_loss must be 'squared' or 'smooth_l1', received"
                              f" {self.vf_loss!r}")
        check_int("num_sgd_iters", self.num_sgd_iters, minimum=1)
        check_int("sgd_minibatch_size", self.sgd_minibatch_size, minimum=1, optional=True)
        batch = self.num_envs * self.horizon
        if self.sgd_minibatch_size is not None and self.sgd_minibatch_size > batch:
            raise ConfigError(f"sgd_minibatch_size={self.sgd_minibatch_size} exceeds the buffer's"
                              f" num_envs * horizon = {batch}")
        for name in ("update_chunk_size", "collect_chunk_size"):
            if getattr(self, name) not in (None, "auto"):
                check_int(name, getattr(self, name), minimum=1, also='"auto" or None')
        if self.desired_kl is not None and self.lr_schedule is not None:
            raise ConfigError("desired_kl adapts the learning rate, lr_schedule sets it: pass one")
        if self.accumulate_grads and self.num_minibatches == 1:
            raise ConfigError("accumulate_grads=True needs more than one minibatch; set"
                              " sgd_minibatch_size below num_envs * horizon or disable it")
        for name in ("compile", "cuda_graphs"):
            if not (isinstance(value := getattr(self, name), bool) or value == "auto"):
                raise ConfigError(f"{name} must be True, False or 'auto', received {value!r}")
        for f in dataclasses.fields(self):
            if f.type in ("bool", bool) and not isinstance(value := getattr(self, f.name), bool):
                raise ConfigError(f"{f.name} must be a bool, received {value!r}")
        try:
            validate_schedule("entropy_coeff_schedule", self.entropy_coeff_schedule,
                              self.entropy_coeff_schedule_kind)
            validate_schedule("lr_schedule", self.lr_schedule, self.lr_schedule_kind)
            resolve_device(self.device)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        optimizer = self.optimizer_cls
        if not (isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer)):
            raise ConfigError(f"optimizer_cls must be a torch.optim.Optimizer subclass, received"
                              f" {optimizer!r}")
        for name in ("optimizer_config", "model_config", "env_config"):
            if not isinstance(value := getattr(self, name), dict | None):
                raise ConfigError(f"{name} must be a dict or None, received {value!r}")
        for key, value in (self.optimizer_config or {}).items():
            if not _is_finite(value):
                raise ConfigError(f"optimizer_config[{key!r}] must be finite, received {value!r}")
        lr = (self.optimizer_config or {}).get("lr", 3e-4)
        if not isinstance(lr, (numbers.Real, torch.Tensor)) or not float(lr) > 0:
            raise ConfigError(f"optimizer_config['lr'] must be > 0, received {lr!r}")
        if self.model is not None and (self.model_cls is not None or self.model_config):
            raise ConfigError("model excludes model_cls and model_config; pass one or the other")
        if self.model is not None and not isinstance(self.model, torch.nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module (a rl8lite Model), received"
                              f" {self.model!r}")
        if self.model_cls is not None and not callable(self.model_cls):
            raise ConfigError(f"model_cls must be a Model class, received {self.model_cls!r}")
        dist = self.distribution_cls
        if dist is not None and not (isinstance(dist, type) and issubclass(dist, Distribution)):
            raise ConfigError(f"distribution_cls must be a rl8lite.distributions.Distribution"
                              f" subclass, received {dist!r}")
        check_int("seed", self.seed, minimum=0, optional=True)
        return self

    @property
    def num_minibatches(self) -> int:
        """Minibatches per pass over the buffer."""
        batch = self.num_envs * self.horizon
        return math.ceil(batch / (self.sgd_minibatch_size or batch))

    def optimizer_kwargs(self) -> dict[str, Any]:
        """The optimizer's keyword arguments (``lr=3e-4``; Adam/AdamW fused by default)."""
        kwargs: dict[str, Any] = {"lr": 3e-4, **(self.optimizer_config or {})}
        adam = self.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW)
        if adam and not {"fused", "foreach"} & set(kwargs):
            kwargs["fused"] = True
        return kwargs

    def build(self, env: Any, /) -> Any:
        """An algorithm for ``env`` (an :class:`~rl8lite.Env` class or instance)."""
        return self.algorithm_cls(env, self)

    def for_instance(self, env: Any, overrides: dict[str, Any]) -> AlgorithmConfig:
        """This config with an env instance's ``num_envs``, ``horizon`` and ``device``."""
        if getattr(env, "closed", False):
            raise ValueError(f"the {type(env).__name__} instance is closed: build a new one")
        defaults = type(self)()
        taken = {"num_envs": env.num_envs, "device": str(env.device)}
        if env.horizon is not None:
            taken["horizon"] = env.horizon
        for name, value in taken.items():
            given = overrides.get(name, getattr(self, name))
            explicit = name in overrides or given != getattr(defaults, name)
            if name == "device" and given != "auto":
                given = str(torch.device(given))
            if explicit and given != value:
                raise ConfigError(f"{name}={given!r} conflicts with the {type(env).__name__}"
                                  f" instance's {name}={value!r}: an env instance brings its own")
        return self.replace(**taken)

    def replace(self, **overrides: Any) -> AlgorithmConfig:
        """A copy with ``overrides``; an unknown name is a ``TypeError`` naming the closest ones."""
        names = [f.name for f in dataclasses.fields(self)]
        if unknown := sorted(set(overrides) - set(names)):
            fields = unknown_fields(unknown, names)
            raise TypeError(f"unknown {type(self).__name__} field(s): {fields}")
        return dataclasses.replace(self, **overrides)


def unknown_fields(unknown: list[str], valid: list[str]) -> str:
    """``'num_env' (did you mean 'num_envs'?)`` per unknown name, then the valid names."""
    hints, close = [], []
    for key in unknown:
        matches = difflib.get_close_matches(str(key), valid, n=3, cutoff=0.6)
        close += [m for m in matches if m not in close]
        hints.append(f"{key!r} (did you mean {matches[0]!r}?)" if matches else repr(key))
    rest = sorted(set(valid) - set(close))
    return f"{', '.join(hints)}; valid fields: {', '.join(close + rest)}"


#: Range of each float field (``(``/``)``: open bounds; ``or None``: ``None`` allowed).
_FLOAT_RANGES = {"gamma": "(0.0, 1.0]", "gae_lambda": "[0.0, 1.0]", "clip_param": "(0.0, 1.0)",
                 "vf_clip_param": "(0.0, inf) or None", "dual_clip_param": "(1.0, inf) or None",
                 "vf_coeff": "[0.0, inf)", "entropy_coeff": "[0.0, inf)",
                 "target_kl_div": "(0.0, inf) or None", "max_grad_norm": "(0.0, inf) or None",
                 "desired_kl": "(0.0, inf) or None",
                 "observation_clip": "(0.0, inf)"}


def check_int(name: str, value: Any, *, minimum: int | None = None, optional: bool = False,
              also: str | None = None, error: type[Exception] = ConfigError) -> None:
    """Raise ``error`` unless ``value`` is an int ``>= minimum`` (or ``None`` when ``optional``)."""
    if value is None and optional:
        return
    wrong_type = isinstance(value, bool) or not isinstance(value, numbers.Integral)
    if wrong_type or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        alternatives = f" or {also}" if also else (" or None" if optional else "")
        raise error(f"{name} must be an int{bound}{alternatives}, received {value!r}")


def check_float(name: str, value: Any, interval: str) -> None:
    """Raise a :class:`ConfigError` unless ``value`` is a number in ``interval``."""
    if value is None and interval.endswith(" or None"):
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, received {value!r}")
    bounds = interval.split(" or ")[0]
    low, high = (float(bound) for bound in bounds[1:-1].split(", "))
    too_low = value <= low if bounds[0] == "(" else value < low
    if too_low or (value >= high if bounds[-1] == ")" else value > high):
        raise ConfigError(f"{name} must be in {interval}, received {value}")


def _is_finite(value: Any) -> bool:
    """False when ``value`` is, or (a tuple or list: Adam's ``betas``) holds, a NaN or inf."""
    if isinstance(value, (tuple, list)):
        return all(_is_finite(v) for v in value)
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    return not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral) or (
        math.isfinite(value))


@dataclass
class RecurrentAlgorithmConfig(AlgorithmConfig):
    """:class:`AlgorithmConfig` plus rl8's recurrent fields (truncated BPTT over sequences);
    ``sgd_minibatch_size`` (a multiple of ``seq_len``) and ``update_chunk_size`` count steps."""

    #: Time steps per sequence of truncated backpropagation (a factor of ``horizon``).
    seq_len: int = 4
    #: Reset the recurrent states every this many sequences (``> 0``), or only at env resets
    #: (``< 0``); a copy's state is also reset whenever its episode ends.
    seqs_per_state_reset: int = 8

    def validate(self) -> RecurrentAlgorithmConfig:
        super().validate()
        check_int("seq_len", self.seq_len, minimum=1)
        check_int("seqs_per_state_reset", self.seqs_per_state_reset)
        if self.seqs_per_state_reset == 0:
            raise ConfigError("seqs_per_state_reset must be > 0 or < 0, received 0")
        if self.horizon % self.seq_len:
            raise ConfigError(f"seq_len={self.seq_len} must be a factor of horizon={self.horizon}")
        if self.sgd_minibatch_size is not None and self.sgd_minibatch_size % self.seq_len:
            raise ConfigError(f"sgd_minibatch_size={self.sgd_minibatch_size} must be a multiple of"
                              f" seq_len={self.seq_len} (whole sequences)")
        return self


__all__ = ["AlgorithmConfig", "ConfigError", "RecurrentAlgorithmConfig", "check_float", "check_int",
           "unknown_fields"]
