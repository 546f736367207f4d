"""PPO over one preallocated buffer: ``collect`` (the rollout) then ``step`` (the update)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensordict
import torch
from tensordict import TensorDict

from .._version import __version__
from ..data import DataKeys
from ..env import Env, env_label
from ..models import DefaultModel, DefaultRecurrentModel, Model
from ..policies import Policy, build_policy
from ..runtime.distributed import Ranks, join_process_group, shares_failures
from ..runtime.imports import qualified_name
from ..runtime.malloc import keep_freed_memory
from ..runtime.memory import device_memory, optimizer_bytes, tensor_bytes, tensordict_bytes
from ..runtime.seeding import seed_everything
from ..schedulers import EntropyScheduler, LRScheduler
from .advantages import generalized_advantage_estimate
from .buffer import allocate_buffer, buffer_state, load_buffer_state
from .checks import check_env_cls, dry_run
from .chunks import resolve_chunk_size
from .config import (
    AlgorithmConfig,
    ConfigError,
    RecurrentAlgorithmConfig,
    optimizer_kwargs,
    resolve_horizons_per_env_reset,
)
from .data_parallel import WholeBatch, broadcast_module_, check_same_config
from .carry import recurrence_for
from .rollout import Rollout
from .statistics import CollectStatistics
from .update import PPOUpdate

_EPS = 1e-8


@dataclass
class AlgorithmState:
    """Counters and scales that evolve during training."""

    #: Collects done so far (rl8's ``horizons``); drives env resets.
    horizons: int = 0
    #: Whether the buffer holds a collect not yet used by ``step``.
    buffered: bool = False
    #: Std of the running discounted returns; rewards are divided by it.
    reward_scale: float = 1.0
    #: Policy updates done so far.
    steps: int = 0
    #: Sequences of ``seq_len`` steps collected so far (recurrent policies; rl8's ``seqs``).
    seqs: int = 0


class Algorithm:
    """Proximal Policy Optimization over a batched env, with one shared buffer.

    Composed of parts with one job each: the :attr:`rollout` (env steps into the
    buffer), the :attr:`recurrence` (what the policy carries between steps: nothing,
    or a recurrent state), the :attr:`statistics` of each collect, and the
    :attr:`update` (SGD passes over the buffer). A recurrent model makes the
    algorithm recurrent; :class:`RecurrentAlgorithm` is rl8's name for it.

    Started by ``torchrun`` (several processes), each process is one rank of a
    data-parallel job (:mod:`rl8lite.algorithms.data_parallel`): ``num_envs`` copies of its
    own, seeded ``seed + rank``, parameters broadcast from rank 0, gradients and
    whole-batch statistics taken over every rank, and counts (``env/steps``) global.

    Args:
        env_cls: The env class; built as ``env_cls(num_envs, horizon, device=...)``.
        config: Hyperparameters (default :class:`AlgorithmConfig`).
        **overrides: Any config field, overriding ``config``; an unknown name is a
            ``TypeError`` listing the valid ones.

    Examples:
        >>> from rl8lite import Algorithm
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> algo = Algorithm(DiscreteDummyEnv, num_envs=8, horizon=4, seed=0)
        >>> sorted(algo.collect())[:2]
        ['env/resets', 'env/steps']
        >>> "losses/total" in algo.step()
        True
    """

    #: Model built when no model/model_cls is configured.
    default_model_cls: type[Model] = DefaultModel

    env: Env
    policy: Policy
    buffer: TensorDict
    optimizer: torch.optim.Optimizer
    hparams: AlgorithmConfig
    state: AlgorithmState

    def __init__(
        self, env_cls: type[Env], /, config: AlgorithmConfig | None = None, **overrides: Any
    ) -> None:
        check_env_cls(env_cls)
        config = (config or AlgorithmConfig()).replace(**overrides)
        config.validate()
        self.env_cls = env_cls
        #: This process's place among the training processes (one, without torchrun).
        self.ranks: Ranks
        self.ranks, self.device = join_process_group(config.device)
        self._build(config)

    @shares_failures
    def _build(self, config: AlgorithmConfig) -> None:
        env_cls = self.env_cls
        if config.tune_malloc and self.device.type == "cpu":
            keep_freed_memory()
        if config.seed is not None:
            seed_everything(config.seed + self.ranks.rank)
        self.hparams = hp = dataclasses.replace(
            config,
            horizons_per_env_reset=resolve_horizons_per_env_reset(config, env_cls),
            device=str(self.device),
        )
        if self.ranks.distributed:
            check_same_config(self.ranks, dataclasses.replace(hp, device="per rank"), env_cls)
        env_kwargs: dict[str, Any] = {"device": self.device}
        if config.env_config:
            env_kwargs["config"] = dict(config.env_config)
        self.env = env_cls(hp.num_envs, hp.horizon, **env_kwargs)
        obs_spec, action_spec = self.env.observation_spec, self.env.action_spec
        try:
            self.policy = build_policy(obs_spec, action_spec, hp, self.default_model_cls, device=self.device)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cannot build the model from model_cls/model_config: {e}") from e
        broadcast_module_(self.policy, self.ranks)
        self.buffer = allocate_buffer(
            obs_spec, action_spec, num_envs=hp.num_envs, horizon=hp.horizon, device=self.device,
            normalize_rewards=hp.normalize_rewards,
        )
        collect_chunk = resolve_chunk_size(hp.collect_chunk_size, self.device, self.policy)
        self.recurrence = recurrence_for(self.policy, hp, self.device, collect_chunk, self.buffer, obs_spec)
        self.rollout = Rollout(self.env, self.buffer, self.recurrence)
        self.statistics = CollectStatistics(
            hp.num_envs, gamma=hp.gamma, normalize_rewards=hp.normalize_rewards, device=self.device,
            ranks=self.ranks,
        )
        self.whole_batch = WholeBatch(self.ranks)
        try:
            self.optimizer = hp.optimizer_cls(self.policy.parameters(), **self.optimizer_config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cannot build {hp.optimizer_cls.__name__} from optimizer_config: {e}") from e
        self.lr_scheduler = LRScheduler(self.optimizer, schedule=hp.lr_schedule, kind=hp.lr_schedule_kind)
        self.entropy_scheduler = EntropyScheduler(
            hp.entropy_coeff, schedule=hp.entropy_coeff_schedule, kind=hp.entropy_coeff_schedule_kind
        )
        self.update = PPOUpdate(
            self.optimizer, list(self.policy.parameters()), self.recurrence.evaluate,
            unit_length=self.recurrence.unit_length, hparams=hp, device=self.device,
            chunk_samples=resolve_chunk_size(hp.update_chunk_size, self.device, self.policy),
            ranks=self.ranks,
        )
        self.state = AlgorithmState()
        self._needs_reset = True

    @property
    def optimizer_config(self) -> dict[str, Any]:
        """The optimizer's keyword arguments (see :func:`~rl8lite.algorithms.config.optimizer_kwargs`)."""
        return optimizer_kwargs(self.hparams)

    # ------------------------------------------------------------------ collect
    @shares_failures
    def collect(
        self, *, env_config: dict[str, Any] | None = None, deterministic: bool = False
    ) -> dict[str, float]:
        """Step the env ``horizon`` times, filling the buffer; return summary stats.

        The env is reset (with ``env_config``) when ``horizons % k == 0`` for
        ``k = horizons_per_env_reset > 0``, or only at the first collect for
        ``k < 0``; otherwise the rollout continues from the last observation.
        """
        start = time.perf_counter()
        k = self.horizons_per_env_reset
        reset = self._needs_reset or (k > 0 and self.state.horizons % k == 0)
        with torch.inference_mode():
            # --- first observation: a reset (restarting every carry), or where the last collect ended
            obs = self.rollout.first_observation(reset=reset, env_config=env_config)
            if reset:
                self._needs_reset = False
                self.statistics.restart()
            # --- rollout: horizon samples and env steps into the buffer, no host sync
            obs = self.rollout.run(obs, deterministic=deterministic)
            # --- once per collect: finiteness, values (bootstrap, truncated episodes), statistics
            self.rollout.check_finite()
            self.rollout.fill_values(obs)
            stats = self.statistics.of_collect(self.buffer, episodic=bool(self.rollout.episodic))
        if self.hparams.normalize_rewards:
            self.state.reward_scale = stats["coefficients/reward_scale"]
        self.state.horizons += 1
        if self.policy.recurrent:
            self.state.seqs += self.hparams.horizon // self.recurrence.unit_length
        self.state.buffered = True
        copies = self.hparams.num_envs * self.ranks.world_size
        stats["env/steps"] = float(copies * self.hparams.horizon)
        stats["env/resets"] = float(copies if reset else 0)
        stats["profiling/collect_ms"] = 1000.0 * (time.perf_counter() - start)
        return stats

    # ------------------------------------------------------------------ step
    @shares_failures
    def step(self) -> dict[str, float]:
        """Update the policy from the buffered collect; return loss and monitor stats."""
        if not self.state.buffered:
            raise RuntimeError(
                f"{type(self).__name__}.step needs a collect first: call collect() before step()"
            )
        start = time.perf_counter()
        hp, buf, horizon = self.hparams, self.buffer, self.hparams.horizon

        # --- advantages and value targets: GAE over the scaled rewards, into the buffer
        values = buf[DataKeys.VALUES][:, :, 0]
        reward_scale = self.state.reward_scale if hp.normalize_rewards else 1.0
        advantages, returns = generalized_advantage_estimate(
            buf[DataKeys.REWARDS][:, :horizon, 0] / (reward_scale + _EPS),
            values,
            gamma=hp.gamma,
            gae_lambda=hp.gae_lambda,
            terminated=buf[DataKeys.TERMINATED][:, :horizon, 0],
            truncated=buf[DataKeys.TRUNCATED][:, :horizon, 0],
            final_values=buf[DataKeys.FINAL_VALUES][:, :horizon, 0],
            out=(buf[DataKeys.ADVANTAGES][:, :horizon, 0], buf[DataKeys.RETURNS][:, :horizon, 0]),
        )
        whole = self.whole_batch  # this buffer's samples, or every rank's
        explained_variance = 1.0 - whole.var(returns - values[:, :horizon]) / (whole.var(returns) + _EPS)

        # --- the update reads chunks straight from the buffer (no flattened copies);
        # advantages are normalised chunk by chunk with the whole batch's statistics
        batch = self.recurrence.update_batch(
            buf, whole.normalization(advantages) if hp.normalize_advantages else None
        )
        if hp.enable_amp:
            self.update.recompute_old_logp(batch)

        # --- minibatch SGD passes; the coefficients logged are the ones this update used
        lr_used, entropy_coeff_used = self.lr_scheduler.lr, self.entropy_scheduler.coeff
        result = self.update.run(batch, entropy_coeff_used)

        # --- schedules move with training env transitions (the logged env/steps axis)
        env_steps = hp.num_envs * self.ranks.world_size * horizon * (self.state.steps + 1)
        self.lr_scheduler.step(env_steps)
        self.entropy_scheduler.step(env_steps)
        self.state.buffered = False
        self.state.steps += 1

        means = result.means
        stats = {f"losses/{name}": means[name] for name in ("total", "policy", "vf", "entropy")}
        stats["monitors/kl_div"] = means["kl_div"]
        stats["monitors/clip_fraction"] = means["clip_fraction"]
        stats["monitors/grad_norm"] = result.grad_norm
        stats["monitors/explained_variance"] = float(explained_variance)
        stats["monitors/sgd_iters"] = float(result.passes)
        stats["coefficients/entropy"] = entropy_coeff_used
        stats["coefficients/vf"] = hp.vf_coeff
        stats["coefficients/lr"] = lr_used
        stats["profiling/step_ms"] = 1000.0 * (time.perf_counter() - start)
        return stats

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Everything that evolves during training: policy, optimizer, schedules,
        reward-scale and episode carries, the buffer and the env's state.

        Together with the config (and the RNG states, which
        :func:`rl8lite.runtime.checkpoint_files.capture_rng` adds) it continues training exactly.
        """
        grad_scaler = self.update.grad_scaler
        state = {
            "policy": {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "grad_scaler": grad_scaler.state_dict() if grad_scaler is not None else None,
            "lr": self.lr_scheduler.lr,
            "entropy_coeff": self.entropy_scheduler.coeff,
            "state": dataclasses.asdict(self.state),
            "carries": {
                **self.statistics.state_dict(),
                "needs_reset": self._needs_reset,
                "episodic": self.rollout.episodic,
            },
            "buffer": buffer_state(self.buffer),
            "env": {
                k: v.cpu() if isinstance(v, torch.Tensor) else v
                for k, v in self.env.state_dict().items()
            },
        }
        carried = self.recurrence.state_dict()
        if carried:  # a recurrent state ("recurrent", as 0.1.0 named it) or windows of the past
            state["recurrent" if self.policy.recurrent else "windows"] = carried
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (onto this algorithm's device)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.update.grad_scaler is not None and state.get("grad_scaler"):
            self.update.grad_scaler.load_state_dict(state["grad_scaler"])
        self.lr_scheduler._set(float(state["lr"]))
        self.entropy_scheduler.coeff = float(state["entropy_coeff"])
        self.state = AlgorithmState(**state["state"])
        carries = state["carries"]
        self.statistics.load_state_dict(carries)
        self._needs_reset = bool(carries["needs_reset"])
        self.rollout.episodic = carries["episodic"]
        load_buffer_state(self.buffer, state["buffer"])
        self.env.load_state_dict(state["env"])
        self._needs_reset = self._needs_reset or not self.env.restores_state
        for key in ("recurrent", "windows"):
            if key in state:
                self.recurrence.load_state_dict(state[key])

    # ------------------------------------------------------------------ introspection
    @property
    def horizons_per_env_reset(self) -> int:
        """Collects between env resets (``< 0``: reset only at the first collect)."""
        value = self.hparams.horizons_per_env_reset
        assert value is not None
        return value

    @property
    def seq_len(self) -> int:
        """Time steps per update unit: ``seq_len`` of a recurrent policy's sequences, else 1."""
        return self.recurrence.unit_length

    @property
    def update_chunk_samples(self) -> int | None:
        """``update_chunk_size`` resolved for this device (``None``: whole minibatches)."""
        return self.update.chunk_samples

    def request_env_reset(self) -> None:
        """Make the next collect reset the env (with that collect's ``env_config``)."""
        self._needs_reset = True

    def close(self) -> None:
        """Close the env (:meth:`rl8lite.Env.close`: its worker processes, if any)."""
        self.env.close()

    @property
    def params(self) -> dict[str, Any]:
        """Every hyperparameter and class path, flat, for experiment tracking."""
        hp = self.hparams
        params: dict[str, Any] = {}
        for f in dataclasses.fields(hp):
            if f.name not in ("model", "model_cls", "distribution_cls", "optimizer_cls"):
                params[f.name] = getattr(hp, f.name)
        params["env_cls"] = env_label(self.env_cls)
        params["model_cls"] = qualified_name(self.policy.model)
        params["distribution_cls"] = qualified_name(self.policy.distribution_cls)
        params["optimizer_cls"] = qualified_name(self.optimizer)
        params["optimizer_config"] = self.optimizer_config
        params["model_config"] = self.policy.model.config if hasattr(self.policy.model, "config") else hp.model_config
        params["num_parameters"] = sum(p.numel() for p in self.policy.parameters())
        params["world_size"] = self.ranks.world_size  # num_envs is per process
        params["versions/rl8lite"] = __version__
        params["versions/torch"] = torch.__version__
        params["versions/tensordict"] = tensordict.__version__
        params["versions/numpy"] = np.__version__
        return params

    def memory_stats(self) -> dict[str, float]:
        """Bytes held by the buffer, model and optimizer, and the device's memory use."""
        stats = device_memory(self.device)
        stats["memory/buffer_bytes"] = float(tensordict_bytes(self.buffer) + self.recurrence.state_bytes())
        stats["memory/model_bytes"] = float(tensor_bytes(self.policy.parameters()))
        stats["memory/optimizer_bytes"] = float(optimizer_bytes(self.optimizer))
        return stats

    def validate(self) -> None:
        """Check the env and policy against the specs with one collect-sized dry run.

        Resets the env, samples the policy, steps once, and checks every output's
        keys, shapes, dtypes, bounds and finiteness; raises an error naming the
        culprit. Leaves the buffer untouched, and the next collect resets the env.
        """
        self._needs_reset = True  # set first: the env is reset/stepped below even if a check fails
        dry_run(self.env, self.policy, self.hparams.num_envs, self.recurrence.first_step_inputs)


class RecurrentAlgorithm(Algorithm):
    """rl8's name for PPO with a recurrent policy: :class:`Algorithm` with a
    :class:`~rl8lite.algorithms.config.RecurrentAlgorithmConfig` and, by default,
    :class:`~rl8lite.models.DefaultRecurrentModel`. The same collect and update, with
    the state carried (see :class:`~rl8lite.algorithms.recurrence.Recurrent`).

    Args:
        env_cls: The env class.
        config: A :class:`~rl8lite.algorithms.config.RecurrentAlgorithmConfig` (default one if omitted).
        **overrides: Any config field.

    Examples:
        >>> from rl8lite import RecurrentAlgorithm
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> algo = RecurrentAlgorithm(DiscreteDummyEnv, num_envs=4, horizon=8, seq_len=4)
        >>> "losses/total" in (algo.collect(), algo.step())[1]
        True
    """

    default_model_cls = DefaultRecurrentModel

    def __init__(
        self, env_cls: type[Env], /, config: AlgorithmConfig | None = None, **overrides: Any
    ) -> None:
        config = config or RecurrentAlgorithmConfig()
        if not isinstance(config, RecurrentAlgorithmConfig):
            raise TypeError("RecurrentAlgorithm needs a RecurrentAlgorithmConfig")
        super().__init__(env_cls, config, **overrides)
        if not self.policy.recurrent:
            raise ConfigError("RecurrentAlgorithm needs a RecurrentModel (model_cls/model)")

