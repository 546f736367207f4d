"""``AlgorithmConfig``: every PPO hyperparameter, documented once, validated in one place."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from ..data import Device
from ..schedulers import Schedule, ScheduleKind, validate_schedule

if TYPE_CHECKING:
    from ..distributions import Distribution
    from ..env import Env
    from ..models import Model, ModelFactory
    from .algorithm import Algorithm


class ConfigError(ValueError):
    """A hyperparameter is out of range; the message names it and the valid range."""


@dataclass
class AlgorithmConfig:
    """Hyperparameters of feedforward PPO (rl8's field names and meanings).

    Build an algorithm with ``config.build(EnvClass)`` or
    ``Algorithm(EnvClass, config, **overrides)``.

    Examples:
        >>> from rl8lite import AlgorithmConfig
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> algo = AlgorithmConfig(num_envs=16, horizon=8, seed=0).build(DiscreteDummyEnv)
        >>> algo.buffer.batch_size
        torch.Size([16, 9])
    """

    #: Env copies simulated in parallel (``>= 1``; capped by ``Env.max_num_envs``).
    num_envs: int = 256
    #: Env steps per copy in each collect (``>= 1``). The buffer is ``[num_envs, horizon + 1]``.
    horizon: int = 32
    #: Reset the env every this many collects (``> 0``), or only at the first
    #: collect (``< 0``); ``0`` is invalid. ``None`` picks ``ceil(max_episode_steps
    #: / horizon)`` for envs that declare ``max_episode_steps``, else ``1`` (rl8's default).
    horizons_per_env_reset: int | None = None
    #: Initial env parameters passed to the env class at construction.
    env_config: dict[str, Any] | None = None
    #: Discount factor in ``(0, 1]``.
    gamma: float = 0.99
    #: GAE lambda in ``[0, 1]``: lower trades variance for bias.
    gae_lambda: float = 0.95
    #: PPO ratio clip ``eps`` in ``(0, 1)``.
    clip_param: float = 0.2
    #: Value loss per sample: ``"squared"`` (``(V - R)^2 / 2``, standard PPO) or
    #: ``"smooth_l1"`` (rl8's: smooth-L1 of ``V - R``, capped at ``vf_clip_param``).
    vf_loss: Literal["squared", "smooth_l1"] = "squared"
    #: With ``vf_loss="squared"``: clip of the value update around the old values
    #: (``> 0``); with ``"smooth_l1"``: the cap on each sample's loss (rl8's meaning, its
    #: default 5). ``None``: no clip.
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
    #: Optimizer class (default Adam).
    optimizer_cls: type[torch.optim.Optimizer] = torch.optim.Adam
    #: Keyword arguments of the optimizer (default ``{"lr": 3e-4}``); its numbers must be finite.
    optimizer_config: dict[str, Any] | None = None
    #: Samples per minibatch (``1..num_envs * horizon``); ``None`` is the whole buffer.
    sgd_minibatch_size: int | None = None
    #: Passes over the buffer per ``step`` (``>= 1``).
    num_sgd_iters: int = 4
    #: Shuffle the buffer into new minibatches on every pass (a pass that takes a single
    #: optimizer step, on one minibatch of every sample or with ``accumulate_grads``,
    #: draws no shuffle: the order of its samples cannot change the step).
    shuffle_minibatches: bool = True
    #: Stop a ``step``'s passes early once a pass's mean approximate KL exceeds
    #: ``1.5 * target_kl_div`` (``> 0``), or ``None`` never to stop early.
    target_kl_div: float | None = None
    #: Clip the global gradient norm to this (``> 0``), or ``None`` for no clip.
    max_grad_norm: float | None = 1.0
    #: Normalise advantages by the buffer's mean and std.
    normalize_advantages: bool = True
    #: Divide rewards by the std of their running discounted sums (as in rl8).
    normalize_rewards: bool = True
    #: Accumulate gradients over every minibatch of a pass and step the optimizer
    #: once per pass (needs more than one minibatch).
    accumulate_grads: bool = False
    #: Automatic mixed precision in the update: fp16 with a grad scaler on CUDA,
    #: bf16 autocast on CPU. The collected log-probabilities are recomputed at that
    #: precision first (one policy forward without autograd), so the PPO ratio starts at 1
    #: (within float noise with ``compile=True``: the recompute runs eagerly).
    enable_amp: bool = False
    #: Largest number of samples in one forward/backward of the update; larger
    #: minibatches are processed in chunks whose gradients add up to the same
    #: update (cache-friendlier on CPUs, and it bounds the activations' memory).
    #: ``None``: no chunking. ``"auto"``: on CPU, as many samples as make about 2**21
    #: activation floats (8 MiB) for the model's width
    #: (:func:`rl8lite.algorithms.chunks.activation_width`): 8192 for the default 2x64 model,
    #: 2048 for 2x256 MLPs, each the size measured fastest for that model on one CPU thread
    #: (``benchmarks/chunks.py``); no chunking on other devices (on an H100, 2048-sample
    #: chunks made a full iteration 15-45x slower than whole-buffer passes).
    update_chunk_size: int | Literal["auto"] | None = "auto"
    #: Largest number of env copies in one policy forward while collecting (sampling,
    #: bootstrap and final values); ``None``: all copies at once. ``"auto"``: on CPU the
    #: same size as ``update_chunk_size="auto"`` (the forward's activations stay in cache
    #: and its memory is bounded: 2048-copy chunks of 2x256 MLPs sampled 1.9x faster than
    #: one forward at 65536 envs), all copies at once on other devices. Copies sampled in
    #: another chunking draw other random numbers, so actions differ from run to run only
    #: when this (or the device, or the model's width under ``"auto"``) changes.
    collect_chunk_size: int | Literal["auto"] | None = "auto"
    #: On a CPU device under Linux/glibc, make malloc keep freed memory for reuse
    #: (:func:`rl8lite.malloc.keep_freed_memory`, process-wide, applied once and not
    #: undone): the update's temporaries stop page-faulting, measured 12-14% faster
    #: updates at 256-1024 envs on one thread (2x256 MLPs). The process's resident
    #: memory then stays near its peak instead of shrinking between updates; the peak
    #: itself measured the same with and without it (3 processes each at 16384 and 65536
    #: envs, see benchmarks/README.md). Skipped when a ``MALLOC_*`` variable or malloc
    #: ``GLIBC_TUNABLES`` are in the environment.
    tune_malloc: bool = True
    #: ``torch.compile`` the update's loss (forward and backward) and, off the CPU,
    #: the policy's sampling step (feedforward collects); costs ~10-20 s of
    #: compilation on the first update (and collect). The update equals eager's within
    #: float tolerance; a compiled sampling step (not on a CPU) draws inductor's own
    #: random numbers, so a seeded run matches an eager one only with
    #: ``torch._inductor.config.fallback_random = True``. Measured on one CPU thread
    #: (2x256 MLPs): 3-7% faster updates at 8-256 envs; compiled sampling was slower
    #: than eager there at every size (13% at 8 envs, 1-3% at 1024-4096), so a CPU
    #: samples eagerly. Each new config in one process compiles anew (torch's limit:
    #: 8 per function).
    compile: bool = False
    #: A ready model instance (excludes ``model_cls``/``model_config``).
    model: Model | None = None
    #: Model class built as ``model_cls(obs_spec, action_spec, **model_config)``.
    model_cls: ModelFactory | None = None
    #: Keyword arguments of the model (for the default model: ``hiddens``,
    #: ``activation``, ``init_log_std``).
    model_config: dict[str, Any] | None = None
    #: Action distribution class; default from the action spec.
    distribution_cls: type[Distribution] | None = None
    #: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or a device.
    device: Device = "auto"
    #: Seed of python's, numpy's and torch's RNGs (``None``: not seeded).
    seed: int | None = None

    def validate(self) -> AlgorithmConfig:
        """Check every range (numbers must be finite); raise :class:`ConfigError` naming the field.

        Returns ``self``.
        """
        _check_int(self, "num_envs", minimum=1)
        _check_int(self, "horizon", minimum=1)
        if self.horizons_per_env_reset is not None:
            _check_int(self, "horizons_per_env_reset")
            if self.horizons_per_env_reset == 0:
                raise ConfigError(
                    "horizons_per_env_reset must be > 0 (reset every k collects) or < 0"
                    " (reset once), received 0"
                )
        _check_float(self, "gamma", low=0.0, high=1.0, low_open=True)
        _check_float(self, "gae_lambda", low=0.0, high=1.0)
        _check_float(self, "clip_param", low=0.0, high=1.0, low_open=True, high_open=True)
        if self.vf_loss not in ("squared", "smooth_l1"):
            raise ConfigError(f"vf_loss must be 'squared' or 'smooth_l1', received {self.vf_loss!r}")
        for name in _NO_LIMIT_WHEN_INFINITE:
            if getattr(self, name) == math.inf:  # "no limit", as None says (older configs use it)
                setattr(self, name, None)
        _check_float(self, "vf_clip_param", low=0.0, low_open=True, optional=True)
        _check_float(self, "dual_clip_param", low=1.0, low_open=True, optional=True)
        _check_float(self, "vf_coeff", low=0.0)
        _check_float(self, "entropy_coeff", low=0.0)
        _check_float(self, "target_kl_div", low=0.0, low_open=True, optional=True)
        _check_float(self, "max_grad_norm", low=0.0, low_open=True, optional=True)
        _check_int(self, "num_sgd_iters", minimum=1)
        batch = self.num_envs * self.horizon
        if self.sgd_minibatch_size is not None:
            _check_int(self, "sgd_minibatch_size", minimum=1)
            if self.sgd_minibatch_size > batch:
                raise ConfigError(
                    f"sgd_minibatch_size={self.sgd_minibatch_size} exceeds the buffer's"
                    f" num_envs * horizon = {batch}"
                )
        if self.update_chunk_size not in (None, "auto"):
            _check_int(self, "update_chunk_size", minimum=1, also='"auto" or None')
        if self.collect_chunk_size not in (None, "auto"):
            _check_int(self, "collect_chunk_size", minimum=1, also='"auto" or None')
        if self.accumulate_grads and self.num_minibatches == 1:
            raise ConfigError(
                "accumulate_grads=True needs more than one minibatch; set"
                " sgd_minibatch_size below num_envs * horizon or disable accumulate_grads"
            )
        for name in ("compile", "tune_malloc", "shuffle_minibatches", "normalize_advantages", "normalize_rewards",
                     "accumulate_grads", "enable_amp"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool, received {getattr(self, name)!r}")
        try:
            validate_schedule("entropy_coeff_schedule", self.entropy_coeff_schedule,
                              self.entropy_coeff_schedule_kind)
            validate_schedule("lr_schedule", self.lr_schedule, self.lr_schedule_kind)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not (isinstance(self.optimizer_cls, type)
                and issubclass(self.optimizer_cls, torch.optim.Optimizer)):
            raise ConfigError(
                f"optimizer_cls must be a torch.optim.Optimizer subclass, received"
                f" {self.optimizer_cls!r}"
            )
        for name in ("optimizer_config", "model_config", "env_config"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"{name} must be a dict or None, received {value!r}")
        for key, value in (self.optimizer_config or {}).items():
            if not _is_finite(value):
                raise ConfigError(f"optimizer_config[{key!r}] must be finite, received {value!r}")
        lr = (self.optimizer_config or {}).get("lr", 3e-4)
        if not isinstance(lr, (numbers.Real, torch.Tensor)) or not float(lr) > 0:
            raise ConfigError(f"optimizer_config['lr'] must be > 0, received {lr!r}")
        if self.model is not None and (self.model_cls is not None or self.model_config):
            raise ConfigError("model excludes model_cls and model_config; pass one or the other")
        from ..distributions import Distribution

        if self.model is not None and not isinstance(self.model, torch.nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module (a rl8lite Model), received {self.model!r}")
        if self.model_cls is not None and not callable(self.model_cls):
            raise ConfigError(f"model_cls must be a Model class, received {self.model_cls!r}")
        if self.distribution_cls is not None and not (
            isinstance(self.distribution_cls, type) and issubclass(self.distribution_cls, Distribution)
        ):
            raise ConfigError(
                "distribution_cls must be a rl8lite.distributions.Distribution subclass,"
                f" received {self.distribution_cls!r}"
            )
        if self.seed is not None:
            _check_int(self, "seed", minimum=0)
        resolve_device(self.device)
        return self

    @property
    def num_minibatches(self) -> int:
        """Minibatches per pass over the buffer."""
        batch = self.num_envs * self.horizon
        return math.ceil(batch / (self.sgd_minibatch_size or batch))

    def build(self, env_cls: type[Env], /) -> Algorithm:
        """An :class:`~rl8lite.Algorithm` for ``env_cls`` with this config."""
        from .algorithm import Algorithm

        return Algorithm(env_cls, self)

    def replace(self, **overrides: Any) -> AlgorithmConfig:
        """A copy with ``overrides``; an unknown name is a ``TypeError`` listing the valid ones."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(
                f"Unknown AlgorithmConfig field(s) {unknown}; valid fields: {sorted(names)}"
            )
        return dataclasses.replace(self, **overrides)


def resolve_device(device: Device) -> torch.device:
    """``"auto"`` becomes CUDA when available, else CPU; an unusable device is an error."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"device {device!r} is not a valid torch device: {e}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available")
    return resolved


def _check_int(
    config: AlgorithmConfig, name: str, *, minimum: int | None = None, also: str | None = None
) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        alternatives = f" or {also}" if also else ""
        raise ConfigError(f"{name} must be an int{alternatives}, received {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, received {value}")


#: Optional limits whose ``inf`` means the same as ``None``: no limit.
_NO_LIMIT_WHEN_INFINITE = ("vf_clip_param", "dual_clip_param", "target_kl_div", "max_grad_norm")


def _check_float(
    config: AlgorithmConfig,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, received {value!r}")
    # A missing bound is an open infinite one: every value must be finite.
    if low is None:
        low, low_open = -math.inf, True
    if high is None:
        high, high_open = math.inf, True
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        interval = f"{left}{low}, {high}{right}"
        suffix = " or None" if optional else ""
        raise ConfigError(f"{name} must be in {interval}{suffix}, received {value}")


def _is_finite(value: Any) -> bool:
    """False when ``value`` is, or (a tuple or list, e.g. Adam's ``betas``) holds, a NaN or inf."""
    if isinstance(value, numbers.Integral):
        return True
    if isinstance(value, numbers.Real):
        return math.isfinite(value)
    if isinstance(value, torch.Tensor):
        return bool(torch.isfinite(value).all())
    if isinstance(value, (tuple, list)):
        return all(_is_finite(v) for v in value)
    return True


def config_fields(config_cls: type[AlgorithmConfig] | None = None) -> list[str]:
    """Names of every field of ``config_cls`` (default :class:`AlgorithmConfig`)."""
    return [f.name for f in dataclasses.fields(config_cls or AlgorithmConfig)]


@dataclass
class RecurrentAlgorithmConfig(AlgorithmConfig):
    """:class:`AlgorithmConfig` plus rl8's recurrent fields (truncated BPTT over sequences).

    ``sgd_minibatch_size`` and ``update_chunk_size`` still count time steps; a
    minibatch must hold whole sequences (a multiple of ``seq_len``), a chunk is
    rounded down to whole sequences.
    """

    #: Time steps per sequence of truncated backpropagation through time (``>= 1``,
    #: a factor of ``horizon``).
    seq_len: int = 4
    #: Reset the recurrent states every this many sequences (``> 0``), or only at env
    #: resets (``< 0``); states are also reset per copy whenever its episode ends.
    seqs_per_state_reset: int = 8

    def validate(self) -> RecurrentAlgorithmConfig:
        super().validate()
        _check_int(self, "seq_len", minimum=1)
        _check_int(self, "seqs_per_state_reset")
        if self.seqs_per_state_reset == 0:
            raise ConfigError("seqs_per_state_reset must be > 0 or < 0, received 0")
        if self.horizon % self.seq_len:
            raise ConfigError(f"seq_len={self.seq_len} must be a factor of horizon={self.horizon}")
        if self.sgd_minibatch_size is not None and self.sgd_minibatch_size % self.seq_len:
            raise ConfigError(
                f"sgd_minibatch_size={self.sgd_minibatch_size} must be a multiple of"
                f" seq_len={self.seq_len} (whole sequences)"
            )
        return self

    def build(self, env_cls: type[Env], /) -> Algorithm:
        from .algorithm import RecurrentAlgorithm

        return RecurrentAlgorithm(env_cls, self)


def optimizer_kwargs(config: AlgorithmConfig) -> dict[str, Any]:
    """The optimizer's keyword arguments: ``lr=3e-4`` and, for Adam/AdamW unless
    ``fused``/``foreach`` is given, the fused implementation (one kernel per step;
    ~20% faster updates on CPU, same math)."""
    kwargs: dict[str, Any] = {"lr": 3e-4, **(config.optimizer_config or {})}
    if config.optimizer_cls in (torch.optim.Adam, torch.optim.AdamW) and "fused" not in kwargs and "foreach" not in kwargs:
        kwargs["fused"] = True
    return kwargs


def resolve_horizons_per_env_reset(config: AlgorithmConfig, env_cls: type[Env]) -> int:
    """The configured value, or enough collects to fit the env's longest episode."""
    if config.horizons_per_env_reset is not None:
        return config.horizons_per_env_reset
    max_steps = (config.env_config or {}).get("max_episode_steps") or getattr(
        env_cls, "max_episode_steps", None
    )
    return math.ceil(max_steps / config.horizon) if max_steps else 1


__all__ = [
    "AlgorithmConfig", "ConfigError", "RecurrentAlgorithmConfig", "config_fields", "resolve_device",
    "optimizer_kwargs", "resolve_horizons_per_env_reset",
]
