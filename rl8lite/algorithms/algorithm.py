"""PPO over one preallocated buffer: ``collect`` (the rollout) then ``step`` (the update)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensordict
import torch

from ..data import DataKeys
from ..env import Env, env_label
from ..models import DefaultModel, DefaultRecurrentModel, Model
from ..nn.normalization import ObservationNormalizer
from ..nn.ppo import gae
from ..policies import build_policy
from ..runtime.checkpoint_files import seed_everything
from ..runtime.distributed import join_process_group, shares_failures
from ..runtime.imports import package_version, qualified_name
from ..runtime.memory import device_memory, keep_freed_memory, optimizer_bytes, tensor_bytes
from ..schedulers import EntropyScheduler, LRScheduler
from . import graphs
from .buffer import allocate_buffer, buffer_state, load_buffer_state
from .chunks import resolve_chunk_size
from .compiled_step import AUTO_COMPILE_AFTER_STEPS, whole_step_unsupported
from .config import AlgorithmConfig, ConfigError, RecurrentAlgorithmConfig
from .data_parallel import WholeBatch, broadcast_module_, check_same_config
from .rollout import NonFiniteError, Rollout, check_env, dry_run
from .statistics import CollectStatistics, merge_collects
from .update import PPOUpdate
from .windowed import Windowed, carry_for

_EPS = 1e-8


@dataclass
class AlgorithmState:
    """Training counters: collects (rl8's ``horizons``), updates, sequences (recurrent); whether the
    buffer holds a collect ``step`` has not used; the reward scale (std of discounted returns)."""

    horizons: int = 0
    buffered: bool = False
    reward_scale: float = 1.0
    steps: int = 0
    seqs: int = 0


class Algorithm:
    """Proximal Policy Optimization over a batched env, with one shared buffer.

    ``env`` is an :class:`~rl8lite.Env` class or an instance (whose ``num_envs``, ``horizon`` and
    ``device`` it takes). Under ``torchrun`` each process is one rank of a data-parallel job.

    Examples:
        >>> from rl8lite import Algorithm
        >>> from rl8lite.env import DiscreteDummyEnv
        >>> algo = Algorithm(DiscreteDummyEnv, num_envs=8, horizon=4, seed=0)
        >>> algo.collect()["env/steps"]
        32.0
        >>> "losses/total" in algo.step()
        True
    """

    #: Model built when no model/model_cls is configured.
    default_model_cls: type[Model] = DefaultModel

    def __init__(self, env: type[Env] | Env, /, config: AlgorithmConfig | None = None,
                 **overrides: Any) -> None:
        check_env(env)
        config = (config or AlgorithmConfig()).replace(**overrides)
        instance = env if isinstance(env, Env) else None
        if instance is not None:
            config = config.for_instance(instance, overrides)
        config.validate()
        self.env_cls: type[Env] = type(env) if instance is not None else env  # type: ignore
        #: Whether the env was handed over as an instance (a checkpoint then needs it to resume).
        self.env_given = instance is not None
        #: This process's place among the training processes (one, without torchrun).
        self.ranks, self.device = join_process_group(config.device)
        self._build(config, instance)

    @shares_failures
    def _build(self, config: AlgorithmConfig, instance: Env | None) -> None:
        if config.tune_malloc and self.device.type == "cpu":
            keep_freed_memory()
        if config.seed is not None:
            seed_everything(config.seed + self.ranks.rank)
        self.hparams = hp = dataclasses.replace(config, device=str(self.device))
        if self.ranks.distributed:
            check_same_config(self.ranks, dataclasses.replace(hp, device="per rank"), self.env_cls)
        env_config = {"config": dict(hp.env_config)} if hp.env_config else {}
        self.env = instance or self.env_cls(hp.num_envs, hp.horizon, device=self.device,
                                            **env_config)
        obs_spec, action_spec = self.env.observation_spec, self.env.action_spec
        try:
            normalizer = (ObservationNormalizer(obs_spec, clip=hp.observation_clip)
                          if hp.normalize_observations else None)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        try:
            self.policy = build_policy(obs_spec, action_spec, hp, self.default_model_cls,
                                       normalizer=normalizer, device=self.device,
                                       obs_groups=self.env.obs_groups)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cannot build the model from model_cls/model_config: {e}") from e
        broadcast_module_(self.policy, self.ranks)
        self.buffer = allocate_buffer(obs_spec, action_spec, num_envs=hp.num_envs,
                                      horizon=hp.horizon, device=self.device,
                                      normalize_rewards=hp.normalize_rewards,
                                      channels_last=getattr(self.policy.model,
                                                            "channels_last_inputs", ()))
        collect_chunk = resolve_chunk_size(hp.collect_chunk_size, self.device, self.policy)
        self.recurrence = carry_for(self.policy, hp, self.device, collect_chunk, self.buffer,
                                    obs_spec)
        self.rollout = Rollout(self.env, self.buffer, self.recurrence)
        self.whole_batch = WholeBatch(self.ranks)
        self.statistics = self._new_statistics()
        #: Why the collect and the update run eagerly on this device, or ``None``: CUDA graphs.
        self.graphs_off = graphs.graphs_unsupported(
            hp, self.device, self.policy.recurrent, isinstance(self.recurrence, Windowed),
            self.ranks.distributed, collect_chunk)
        kwargs = hp.optimizer_kwargs()
        if self.graphs_off is None:
            kwargs = graphs.capturable_optimizer_kwargs(kwargs, self.device)
        try:
            self.optimizer = hp.optimizer_cls(self.policy.parameters(), **kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"cannot build {hp.optimizer_cls.__name__} from optimizer_config:"
                              f" {e}") from e
        self.lr_scheduler = LRScheduler(self.optimizer, schedule=hp.lr_schedule,
                                        kind=hp.lr_schedule_kind)
        self.entropy_scheduler = EntropyScheduler(
            hp.entropy_coeff, schedule=hp.entropy_coeff_schedule,
            kind=hp.entropy_coeff_schedule_kind)
        self.update = PPOUpdate(
            self.optimizer, list(self.policy.parameters()), self.recurrence.evaluate, hparams=hp,
            unit_length=self.recurrence.unit_length, device=self.device, ranks=self.ranks,
            chunk_samples=resolve_chunk_size(hp.update_chunk_size, self.device, self.policy))
        if hp.desired_kl is not None:
            self.update.adapt_lr = lambda kl: self.lr_scheduler.adapt(kl, hp.desired_kl)
        #: Why the update's minibatch step is not compiled whole (CPU only), or ``None``.
        self.whole_step_off = whole_step_unsupported(
            hp, self.device, self.policy.recurrent, isinstance(self.recurrence, Windowed),
            self.ranks.distributed, self.optimizer)
        if hp.compile is True and self.whole_step_off is None:
            self.update.compile_whole_step(self.policy)
        if self.graphs_off is None:
            self.update.step_fn = graphs.GraphedStep(self.update.step_fn, self.update.zero_grad)
            if getattr(self.env, "capturable", False):
                self.rollout.graphed = graphs.GraphedRollout(self.rollout.captured_steps)
            elif self.policy.separable:
                self.recurrence.graphed_sample = graphs.GraphedSampling(self.policy.sample_actions)
        self.state, self._needs_reset = AlgorithmState(), True

    @shares_failures
    def collect(self, *, env_config: dict[str, Any] | None = None,
                deterministic: bool = False) -> dict[str, float]:
        """Step the env ``horizon`` times into the buffer; return summary stats (resetting the env
        under ``env_config`` at the first collect and every ``horizons_per_env_reset > 0``)."""
        k = self.horizons_per_env_reset
        reset = self._needs_reset or (k > 0 and self.state.horizons % k == 0)
        stats = self._collect(env_config, deterministic, reset, self.statistics)
        self._needs_reset = False
        if self.hparams.normalize_rewards:
            self.state.reward_scale = stats["coefficients/reward_scale"]
        self.state.horizons += 1
        if self.policy.recurrent:
            self.state.seqs += self.hparams.horizon // self.recurrence.unit_length
        self.state.buffered = True
        return stats

    def _collect(self, env_config: dict[str, Any] | None, deterministic: bool, reset: bool,
                 statistics: CollectStatistics) -> dict[str, float]:
        start = time.perf_counter()
        with torch.inference_mode():
            # --- first observation: a reset (restarting every carry), or the last collect's last
            obs = self.rollout.first_observation(reset=reset, env_config=env_config)
            if reset:
                statistics.restart()
            # --- rollout: horizon samples and env steps into the buffer, no host sync
            obs = self.rollout.run(obs, deterministic=deterministic)
            # --- once per collect: finiteness, values (bootstrap, truncated episodes), statistics
            self.rollout.check_finite()
            self.rollout.fill_values(obs)
            stats = statistics.of_collect(self.buffer, episodic=bool(self.rollout.episodic))
        copies = self.hparams.num_envs * self.ranks.world_size
        stats["env/steps"] = float(copies * self.hparams.horizon)
        stats["env/resets"] = float(copies if reset else 0)
        stats["profiling/collect_ms"] = 1000.0 * (time.perf_counter() - start)
        return stats

    @shares_failures
    def evaluate(self, *, env_config: dict[str, Any] | None = None, deterministic: bool = True,
                 collects: int | None = None) -> dict[str, float]:
        """Run ``collects`` collects from a reset under ``env_config`` (default: enough for the
        env's ``max_episode_steps``) with statistics of their own, leaving training as it was."""
        hp = self.hparams
        if collects is None:
            max_steps = ((hp.env_config or {}).get("max_episode_steps")
                         or getattr(self.env, "max_episode_steps", None))
            collects = math.ceil(max_steps / hp.horizon) if max_steps else 1
        restores = self.env.restores_state and not self._needs_reset
        saved_env = self.env.state_dict() if restores else None
        config_key = self.rollout.env_config_key
        saved_buffer, saved_carry = self.buffer.clone(), self.recurrence.state_dict()
        statistics = self._new_statistics(window=None)
        try:
            results = [self._collect(env_config, deterministic, reset=i == 0, statistics=statistics)
                       for i in range(collects)]
        finally:
            self.buffer.update_(saved_buffer)
            self.recurrence.load_state_dict(saved_carry)
            if saved_env is not None:
                self.env.load_state_dict(saved_env)
                self.rollout.env_config_key = config_key
            else:
                self._needs_reset = True
        return merge_collects(results)

    def _new_statistics(self, **window: Any) -> CollectStatistics:
        hp = self.hparams
        return CollectStatistics(hp.num_envs, gamma=hp.gamma, device=self.device, **window,
                                 normalize_rewards=hp.normalize_rewards, whole=self.whole_batch)

    @shares_failures
    def step(self) -> dict[str, float]:
        """Update the policy from the buffered collect; return loss and monitor stats."""
        if not self.state.buffered:
            raise RuntimeError(f"{type(self).__name__}.step needs a collect first: call collect()"
                               " before step()")
        start = time.perf_counter()
        hp, buf, horizon = self.hparams, self.buffer, self.hparams.horizon
        # --- advantages and value targets: GAE over the scaled rewards, into the buffer
        values = buf[DataKeys.VALUES][:, :, 0]
        reward_scale = self.state.reward_scale if hp.normalize_rewards else 1.0
        column = lambda key: buf[key][:, :horizon, 0]
        advantages, returns = gae(
            column(DataKeys.REWARDS) / (reward_scale + _EPS), values, gamma=hp.gamma,
            gae_lambda=hp.gae_lambda, terminated=column(DataKeys.TERMINATED),
            truncated=column(DataKeys.TRUNCATED), final_values=column(DataKeys.FINAL_VALUES),
            out=(column(DataKeys.ADVANTAGES), column(DataKeys.RETURNS)))
        whole = self.whole_batch  # this buffer's samples, or every rank's
        residual = returns - values[:, :horizon]
        explained_variance = 1.0 - whole.var(residual) / (whole.var(returns) + _EPS)
        # --- advantages are normalised chunk by chunk with the whole batch's statistics
        normalization = whole.normalization(advantages) if hp.normalize_advantages else None
        batch = self.recurrence.update_batch(buf, normalization)
        if hp.enable_amp:
            self.update.recompute_old_logp(batch)
        # --- minibatch SGD passes; the coefficients logged are the ones this update used
        lr_used, entropy_coeff_used = self.lr_scheduler.lr, self.entropy_scheduler.coeff
        planned_steps = self.state.steps * hp.num_sgd_iters * hp.num_minibatches
        if (hp.compile == "auto" and self.whole_step_off is None and not
                self.update.whole_step_compiled and planned_steps >= AUTO_COMPILE_AFTER_STEPS):
            self.update.compile_whole_step(self.policy)
        result = self.update.run(batch, entropy_coeff_used)
        if self.policy.normalizer is not None:  # after the update: it used the collect's moments
            try:  # sums_tensor: every rank's sums (the identity in one process)
                self.policy.normalizer.update(buf[DataKeys.OBS][:, :horizon], whole.sums_tensor)
            except ValueError as e:
                raise NonFiniteError(str(e)) from e
        # --- schedules move with training env transitions (the logged env/steps axis)
        env_steps = hp.num_envs * self.ranks.world_size * horizon * (self.state.steps + 1)
        self.lr_scheduler.step(env_steps)
        self.entropy_scheduler.step(env_steps)
        self.state.buffered = False
        self.state.steps += 1
        means = result.means
        return {
            **{f"losses/{name}": means[name] for name in ("total", "policy", "vf", "entropy")},
            **{f"monitors/{name}": means[name] for name in ("kl_div", "clip_fraction")},
            "monitors/grad_norm": result.grad_norm, "monitors/sgd_iters": float(result.passes),
            "monitors/explained_variance": float(explained_variance),
            "coefficients/entropy": entropy_coeff_used, "coefficients/vf": hp.vf_coeff,
            "coefficients/lr": lr_used, "profiling/step_ms": 1000.0 * (time.perf_counter() - start)}

    def state_dict(self) -> dict[str, Any]:
        """Everything that evolves during training (checkpoints add the config and RNG states)."""
        grad_scaler = self.update.grad_scaler
        state = {
            "policy": {k: v.detach().cpu().clone() for k, v in self.policy.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "grad_scaler": grad_scaler.state_dict() if grad_scaler is not None else None,
            "lr": self.lr_scheduler.lr,
            "entropy_coeff": self.entropy_scheduler.coeff,
            "state": dataclasses.asdict(self.state),
            "carries": {**self.statistics.state_dict(), "needs_reset": self._needs_reset,
                        "episodic": self.rollout.episodic},
            "buffer": buffer_state(self.buffer),
            "env": {k: v.cpu() if isinstance(v, torch.Tensor) else v
                    for k, v in self.env.state_dict().items()}}
        carried = self.recurrence.state_dict()
        if carried:
            state["recurrent" if self.policy.recurrent else "windows"] = carried
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (onto this algorithm's device)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])  # new state tensors: capture anew
        if self.graphs_off is None:  # captured graphs read the learning rate from a device tensor
            for group in self.optimizer.param_groups:
                lr = torch.as_tensor(group["lr"], dtype=torch.float32, device=self.device)
                group["lr"] = lr.clone()
            captured = (self.update.step_fn, self.rollout.graphed, self.recurrence.graphed_sample)
            for graphed in filter(None, captured):
                graphed.forget()
        if self.update.grad_scaler is not None and state.get("grad_scaler"):
            self.update.grad_scaler.load_state_dict(state["grad_scaler"])
        self.lr_scheduler.set(float(state["lr"]))
        self.entropy_scheduler.coeff = float(state["entropy_coeff"])
        self.state = AlgorithmState(**state["state"])
        carries = state["carries"]
        self.statistics.load_state_dict(carries)
        self.rollout.episodic = carries["episodic"]
        load_buffer_state(self.buffer, state["buffer"])
        self.env.load_state_dict(state["env"])
        self._needs_reset = bool(carries["needs_reset"]) or not self.env.restores_state
        for key in ("recurrent", "windows"):
            if key in state:
                self.recurrence.load_state_dict(state[key])

    @property
    def horizons_per_env_reset(self) -> int:
        """Collects between env resets (``< 0``: only at the first): the configured value, else
        ``-1`` for an env that reports episode ends (or declares ``max_episode_steps``), else 1."""
        if self.hparams.horizons_per_env_reset is not None:
            return self.hparams.horizons_per_env_reset
        episodic = self.rollout.episodic
        if episodic is None:
            episodic = getattr(self.env, "max_episode_steps", None) is not None
        return -1 if episodic else 1

    @property
    def seq_len(self) -> int:
        """Time steps per update unit: ``seq_len`` of a recurrent policy's sequences, else 1."""
        return self.recurrence.unit_length

    @property
    def update_chunk_samples(self) -> int | None:
        """``update_chunk_size`` resolved for this device (``None``: whole minibatches)."""
        return self.update.chunk_samples

    @property
    def optimizer_config(self) -> dict[str, Any]:
        """The optimizer's keyword arguments."""
        return self.hparams.optimizer_kwargs()

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
        classes = ("model", "model_cls", "distribution_cls", "optimizer_cls")
        params: dict[str, Any] = {f.name: getattr(hp, f.name) for f in dataclasses.fields(hp)
                                  if f.name not in classes}
        params.update({
            "env_cls": env_label(self.env_cls), "model_cls": qualified_name(self.policy.model),
            "distribution_cls": qualified_name(self.policy.distribution_cls),
            "optimizer_cls": qualified_name(self.optimizer),
            "optimizer_config": self.optimizer_config,
            "model_config": getattr(self.policy.model, "config", hp.model_config),
            "num_parameters": sum(p.numel() for p in self.policy.parameters()),
            "world_size": self.ranks.world_size,  # num_envs is per process
            "versions/rl8lite": package_version("rl8lite"), "versions/torch": torch.__version__,
            "versions/tensordict": tensordict.__version__, "versions/numpy": np.__version__})
        return params

    def memory_stats(self) -> dict[str, float]:
        """Bytes held by the buffer, model and optimizer, and the device's memory use."""
        stats = device_memory(self.device)
        buffer_bytes = tensor_bytes(self.buffer.values(include_nested=True, leaves_only=True))
        stats["memory/buffer_bytes"] = float(buffer_bytes + self.recurrence.state_bytes())
        stats["memory/model_bytes"] = float(tensor_bytes(self.policy.parameters()))
        stats["memory/optimizer_bytes"] = float(optimizer_bytes(self.optimizer))
        return stats

    def validate(self) -> None:
        """Check the env and policy with one dry run (reset, act, step), naming any culprit."""
        self._needs_reset = True  # first: the env is reset/stepped below even if a check fails
        dry_run(self.env, self.policy, self.hparams.num_envs, self.recurrence.first_step_inputs)


class RecurrentAlgorithm(Algorithm):
    """PPO with a recurrent policy (rl8's name): :class:`Algorithm` with a
    :class:`RecurrentAlgorithmConfig` (``seq_len``, ...), by default a ``DefaultRecurrentModel``."""

    default_model_cls = DefaultRecurrentModel

    def __init__(self, env: type[Env] | Env, /, config: AlgorithmConfig | None = None,
                 **overrides: Any) -> None:
        config = config or RecurrentAlgorithmConfig()
        if not isinstance(config, RecurrentAlgorithmConfig):
            raise TypeError("RecurrentAlgorithm needs a RecurrentAlgorithmConfig")
        super().__init__(env, config, **overrides)
        if not self.policy.recurrent:
            raise ConfigError("RecurrentAlgorithm needs a RecurrentModel (model_cls/model)")


AlgorithmConfig.algorithm_cls = Algorithm
RecurrentAlgorithmConfig.algorithm_cls = RecurrentAlgorithm
