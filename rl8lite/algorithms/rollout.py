"""The rollout into the shared buffer, and the checks of what the env returns."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from ..data import DataKeys
from ..env import Env
from ..env.base import EnvOutputError
from ..specs import Categorical, Composite, Spec, SpecError
from .buffer import final_obs_entry
from .carries import Observation, Recurrence
from .statistics import extrema


class NonFiniteError(ValueError):
    """NaN or Inf in env outputs, the loss or the gradients; the message says where."""


def check_env(env: Any) -> None:
    """Raise a ``TypeError`` unless ``env`` is an :class:`rl8lite.Env` class or instance."""
    if isinstance(env, Env) or (isinstance(env, type) and issubclass(env, Env)):
        return
    received = (f"the class {env.__module__}.{env.__qualname__}, which is not an Env subclass"
                if isinstance(env, type) else f"{env!r} ({type(env).__name__})")
    raise TypeError("env must be an rl8lite.Env subclass or instance (e.g."
                    f" rl8lite.examples.CartPole); received {received}")


def check_batch(value: Any, spec: Spec, num_envs: int, where: str) -> None:
    """``value`` must be ``[num_envs, *spec.shape]`` with the spec's dtype (no data read)."""
    if isinstance(spec, Composite) and not isinstance(value, TensorDictBase):
        # a spec accepts a plain dict, but the buffer stores (and slices) a TensorDict
        raise EnvOutputError(f"{where!r}: expected a TensorDict with batch_size=[{num_envs}] and"
                             f" keys {sorted(spec)}, received {type(value).__name__}")
    try:
        spec.assert_is_in(value, key=where, check_values=False)
    except SpecError as e:
        raise EnvOutputError(str(e)) from None
    shape = value.batch_size if isinstance(value, TensorDictBase) else value.shape
    leading = shape[:1] if isinstance(spec, Composite) else shape[: len(shape) - len(spec.shape)]
    if tuple(leading) != (num_envs,):
        raise EnvOutputError(f"{where!r}: expected a batch dimension of [{num_envs}] (num_envs)"
                             f" before the spec's shape, received shape {list(shape)}")


def check_step_output(out: Any, observation_spec: Spec, num_envs: int, env_name: str) -> None:
    """Keys, shapes and dtypes of one ``env.step`` output."""
    if not hasattr(out, "keys"):
        raise EnvOutputError(f"{env_name}.step must return a TensorDict with 'obs' and 'rewards',"
                             f" received {type(out).__name__}")
    keys = set(out.keys())
    for key in (DataKeys.OBS, DataKeys.REWARDS):
        if key not in keys:
            raise EnvOutputError(f"{env_name}.step output is missing {key!r}; received keys"
                                 f" {sorted(map(str, keys))}")
    for key in (DataKeys.OBS, DataKeys.FINAL_OBS):
        if key in keys:
            check_batch(out[key], observation_spec, num_envs, f"{env_name}.step output {key!r}")
    for key in (DataKeys.REWARDS, DataKeys.TERMINATED, DataKeys.TRUNCATED):
        if key not in keys:
            continue
        value, where = out[key], f"{env_name}.step output {key!r}"
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (num_envs, 1):
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise EnvOutputError(f"{where}: expected shape [{num_envs}, 1], received {shape}")
        rewards = key == DataKeys.REWARDS
        if not (value.dtype.is_floating_point if rewards else value.dtype == torch.bool):
            kind = "floating-point" if rewards else "bool"
            raise EnvOutputError(f"{where}: expected {kind} dtype, received {value.dtype}")
    if (DataKeys.TERMINATED in keys) != (DataKeys.TRUNCATED in keys):
        raise EnvOutputError(f"{env_name}.step returns only one of 'terminated'/'truncated';"
                             " return both (all False where it never happens)")


def check_actions(actions: Any, action_spec: Spec, num_envs: int) -> None:
    """Sampled actions must fit the action spec; values are checked for discrete specs only (a
    Gaussian over a Bounded spec samples outside the bounds, and the env clips, as in rl8)."""
    try:
        discrete = isinstance(action_spec, Categorical)
        action_spec.assert_is_in(actions, key="policy actions", check_values=discrete)
    except SpecError as e:
        raise EnvOutputError(f"{e} (check the model's output size and distribution_cls)") from None
    if actions.shape[0] != num_envs:
        raise EnvOutputError(f"policy actions: expected batch {num_envs}, received"
                             f" {list(actions.shape)}")


def _leaves(name: str, value: torch.Tensor | TensorDict) -> list[tuple[str, torch.Tensor]]:
    if not isinstance(value, TensorDict):
        return [(name, value)]
    return [(f"{name}.{'.'.join(k) if isinstance(k, tuple) else k}", v)
            for k, v in value.items(include_nested=True, leaves_only=True)]


def assert_finite(named: dict[str, torch.Tensor | TensorDict], *, env_name: str) -> None:
    """Raise :class:`NonFiniteError` naming the entry, copies and steps of any NaN or Inf."""
    leaves = [leaf for name, value in named.items() for leaf in _leaves(name, value)]
    leaves = [(n, v) for n, v in leaves if v.is_floating_point() and v.numel()]
    if not leaves:
        return
    # min and max propagate NaN and show +-Inf without isfinite's whole-buffer temporaries
    flags = torch.stack([torch.isfinite(torch.stack(extrema(v))).all() for _, v in leaves])
    for (name, value), ok in zip(leaves, flags.tolist()):
        if ok:
            continue
        bad = ~torch.isfinite(value)
        while bad.ndim > 2:
            bad = bad.any(-1)
        copies = bad.any(1).nonzero().flatten().tolist()
        steps = bad.any(0).nonzero().flatten().tolist()
        more = lambda xs: f"{xs[:10]}{'...' if len(xs) > 10 else ''}"
        raise NonFiniteError(f"{env_name} produced non-finite {name!r} (NaN or Inf) in env copies"
                             f" {more(copies)} at time steps {more(steps)}; training stopped"
                             " before updating the policy")


def dry_run(env: Any, policy: Any, num_envs: int, inputs: Any) -> None:
    """Reset ``env``, act once with ``policy`` on ``inputs(obs)`` and step once, checking all."""
    name = type(env).__name__
    with torch.inference_mode():
        obs = env.reset()
        check_batch(obs, env.observation_spec, num_envs, f"{name}.reset output")
        env.observation_spec.assert_is_in(obs, key=f"{name}.reset output")
        if policy.recurrent:
            states = policy.init_states(num_envs)
            actions, logp, values, _ = policy.act_recurrent(inputs(obs), states)
        else:
            actions, logp, values = policy.act(inputs(obs))
        check_actions(actions, env.action_spec, num_envs)
        for key, value in ((DataKeys.LOGP, logp), (DataKeys.VALUES, values)):
            if tuple(value.shape) != (num_envs, 1):
                raise ValueError(f"policy {key!r}: expected shape [{num_envs}, 1], received"
                                 f" {list(value.shape)}")
        out = env.step(actions)
        check_step_output(out, env.observation_spec, num_envs, name)
        env.observation_spec.assert_is_in(out[DataKeys.OBS], key=f"{name}.step output 'obs'")
        assert_finite({DataKeys.OBS: out[DataKeys.OBS][:, None],
                       DataKeys.REWARDS: out[DataKeys.REWARDS]}, env_name=name)


class Rollout:
    """Steps ``env`` with the policy (through ``recurrence``) into ``buffer``."""

    def __init__(self, env: Env, buffer: TensorDict, recurrence: Recurrence) -> None:
        self.env, self.buffer, self.recurrence = env, buffer, recurrence
        self.num_envs, self.horizon = buffer.batch_size[0], buffer.batch_size[1] - 1
        self.env_name = type(env).__name__
        #: Whether the last collect's env reported episode ends (``None`` before any).
        self.episodic: bool | None = None
        self._final_obs: Observation | None = None
        self._values_after = self._checked_actions = False
        #: The time loop as a CUDA graph (:class:`~.graphs.GraphedRollout`), if any.
        self.graphed: Any = None
        #: ``repr`` of the env config of the last reset (a captured step bakes its parameters in).
        self.env_config_key = "None"
        #: Called with every env step's output while set (videos); the loop then runs eagerly.
        self.observer: Any = None
        self._views: dict[str, tuple[Any, tuple[Any, ...]]] = {}

    def first_observation(self, *, reset: bool, env_config: dict[str, Any] | None) -> Observation:
        """A reset's observations (restarting the recurrence), or where the last collect ended."""
        obs_buf = self.buffer[DataKeys.OBS]
        if reset:
            self.env_config_key = repr(env_config)
            obs = self.env.reset(config=env_config)
            check_batch(obs, self.env.observation_spec, self.num_envs,
                        f"{self.env_name}.reset output")
            obs_buf[:, 0] = obs
            self.recurrence.restart()
            return obs
        self.recurrence.resume()
        obs_buf[:, 0] = obs_buf[:, self.horizon]
        return obs_buf[:, 0].clone()

    def run(self, obs: Observation, *, deterministic: bool) -> Observation:
        """Step ``horizon`` times from ``obs``; return the observation after the last step."""
        if self.graphed is not None and self.episodic is not None and self.observer is None:
            self.graphed((deterministic, self.env_config_key))
            return self.buffer[DataKeys.OBS][:, self.horizon]
        t = [0]
        try:
            return self._steps(obs, deterministic, t)
        except Exception:
            self.check_finite(t[0])  # a NaN/Inf from the env often breaks the policy a step later
            raise

    def captured_steps(self, key: tuple[bool, str]) -> None:
        """The time loop as :class:`~.graphs.GraphedRollout` captures it."""
        self._steps(self.buffer[DataKeys.OBS][:, 0], key[0], [0], checked=True)

    def _time_steps(self, key: str) -> Any:
        """The buffer entry ``key`` as one view per time step, made once (cheaper than indexing)."""
        entry = self.buffer[key]
        made_of, views = self._views.get(key, (None, ()))
        if made_of is not entry:
            views = entry.unbind(1)
            self._views[key] = entry, views
        return views

    def _steps(self, obs: Observation, deterministic: bool, t_now: list[int],
               checked: bool = False) -> Observation:
        n, env, recurrence, buf = self.num_envs, self.env, self.recurrence, self.buffer
        obs_buf, actions_buf = self._time_steps(DataKeys.OBS), self._time_steps(DataKeys.ACTIONS)
        logp_buf, values_buf = self._time_steps(DataKeys.LOGP), self._time_steps(DataKeys.VALUES)
        rewards_buf = self._time_steps(DataKeys.REWARDS)
        terminated_buf = self._time_steps(DataKeys.TERMINATED)
        truncated_buf = self._time_steps(DataKeys.TRUNCATED)
        values_after = self._values_after = recurrence.values_after_rollout
        episodic = checked and bool(self.episodic)
        final_obs_buf = self._final_obs if checked else None
        final_obs_views = self._time_steps(DataKeys.FINAL_OBS) if final_obs_buf is not None else ()
        for t in range(self.horizon):
            t_now[0] = t
            if values_after:
                actions, logp = recurrence.sample(obs, t, deterministic)
            else:
                actions, logp, values = recurrence.act(obs, t, deterministic)
            if not self._checked_actions:
                check_actions(actions, env.action_spec, n)
                self._checked_actions = True
            out = env.step(actions)
            if self.observer is not None:
                self.observer(out)
            if t == 0 and not checked:
                check_step_output(out, env.observation_spec, n, self.env_name)
                episodic = DataKeys.TERMINATED in out.keys()
                if episodic and DataKeys.FINAL_OBS in out.keys():
                    final_obs_buf = final_obs_entry(buf, env.observation_spec)
                    final_obs_views = self._time_steps(DataKeys.FINAL_OBS)
            obs = out[DataKeys.OBS]
            actions_buf[t].copy_(actions)
            logp_buf[t].copy_(logp)
            if not values_after:
                values_buf[t].copy_(values)
            rewards_buf[t].copy_(out[DataKeys.REWARDS])
            obs_buf[t + 1].copy_(obs)
            if episodic:
                terminated, truncated = out[DataKeys.TERMINATED], out[DataKeys.TRUNCATED]
                terminated_buf[t].copy_(terminated)
                truncated_buf[t].copy_(truncated)
                final_obs = None
                if final_obs_views:
                    final_obs = out[DataKeys.FINAL_OBS]
                    final_obs_views[t].copy_(final_obs)
                recurrence.end_step(t, terminated, truncated, final_obs)
        if not episodic:
            buf[DataKeys.TERMINATED].zero_()
            buf[DataKeys.TRUNCATED].zero_()
        self.episodic, self._final_obs = episodic, final_obs_buf
        return obs

    def check_finite(self, steps: int | None = None) -> None:
        """Raise on NaN/Inf in the observations or rewards of the first ``steps`` (default: all)."""
        t, buf = self.horizon if steps is None else steps, self.buffer
        assert_finite({DataKeys.OBS: buf[DataKeys.OBS][:, : t + 1],
                       DataKeys.REWARDS: buf[DataKeys.REWARDS][:, :t, 0]}, env_name=self.env_name)

    def fill_values(self, last_obs: Observation) -> None:
        """Every value the advantages need (V(final_obs) of truncated episodes too)."""
        buf, horizon = self.buffer, self.horizon
        if self._values_after:
            self.recurrence.fill_values(buf)
        else:
            buf[DataKeys.VALUES][:, horizon] = self.recurrence.values(last_obs)
        if not self.episodic:
            return
        final_values = buf[DataKeys.FINAL_VALUES]
        final_values[:, :horizon] = buf[DataKeys.VALUES][:, :horizon]
        if self._final_obs is None:
            return
        copies, steps = buf[DataKeys.TRUNCATED][:, :horizon, 0].nonzero(as_tuple=True)
        if copies.numel():
            final_obs = self._final_obs[copies, steps]
            final_values[copies, steps] = self.recurrence.final_obs_values(final_obs, copies, steps)
