"""Checks of env outputs and policy outputs, with errors that name the culprit.

Structure (keys, shapes, dtypes) is checked without reading data, so it can run
on the first step of every collect. Finiteness reads data (one host sync) and
runs once per collect, after the time loop and before any update.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from ..data import DataKeys
from ..env import Env
from ..specs import Categorical, Composite, Spec, SpecError
from .reductions import extrema


class EnvOutputError(ValueError):
    """An env returned data of the wrong structure (missing key, shape, dtype)."""


class NonFiniteError(ValueError):
    """NaN or Inf in env outputs, the loss or the gradients; the message says where."""


def check_env_cls(env_cls: Any) -> None:
    """``env_cls`` must be a subclass of :class:`rl8lite.Env` (a class, not a name or an instance)."""
    if isinstance(env_cls, type) and issubclass(env_cls, Env):
        return
    if isinstance(env_cls, type):
        received = f"the class {env_cls.__module__}.{env_cls.__qualname__}, which is not an Env subclass"
    elif isinstance(env_cls, Env):
        received = f"an instance of {type(env_cls).__name__}: pass the class, the algorithm builds the env"
    else:
        received = f"{env_cls!r} ({type(env_cls).__name__})"
    raise TypeError(
        f"env_cls must be a subclass of rl8lite.Env (e.g. rl8lite.examples.CartPole); received {received}"
    )


def check_batch(value: Any, spec: Spec, num_envs: int, where: str) -> None:
    """``value`` must be ``[num_envs, *spec.shape]`` with the spec's dtype (no data read)."""
    if isinstance(spec, Composite) and not isinstance(value, TensorDictBase):
        # A spec accepts a plain dict, but the buffer stores (and slices) a TensorDict.
        raise EnvOutputError(
            f"{where!r}: expected a TensorDict with batch_size=[{num_envs}] and keys"
            f" {sorted(spec)}, received {type(value).__name__}"
        )
    try:
        spec.assert_is_in(value, key=where, check_values=False)
    except SpecError as e:
        raise EnvOutputError(str(e)) from None
    shape = value.batch_size if isinstance(value, TensorDictBase) else value.shape
    leading = shape[:1] if isinstance(spec, Composite) else shape[: len(shape) - len(spec.shape)]
    if tuple(leading) != (num_envs,):
        raise EnvOutputError(
            f"{where!r}: expected a batch dimension of [{num_envs}] (num_envs) before the"
            f" spec's shape, received shape {list(shape)}"
        )


def _check_column(out: Any, key: str, num_envs: int, dtype_ok: Any, kind: str, env_name: str) -> None:
    value = out[key]
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (num_envs, 1):
        shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise EnvOutputError(
            f"{env_name}.step output {key!r}: expected shape [{num_envs}, 1], received {shape}"
        )
    if not dtype_ok(value.dtype):
        raise EnvOutputError(
            f"{env_name}.step output {key!r}: expected {kind} dtype, received {value.dtype}"
        )


def check_step_output(out: Any, observation_spec: Spec, num_envs: int, env_name: str) -> None:
    """Keys, shapes and dtypes of one ``env.step`` output."""
    if not hasattr(out, "keys"):
        raise EnvOutputError(
            f"{env_name}.step must return a TensorDict with 'obs' and 'rewards', received"
            f" {type(out).__name__}"
        )
    keys = set(out.keys())
    for key in (DataKeys.OBS, DataKeys.REWARDS):
        if key not in keys:
            raise EnvOutputError(
                f"{env_name}.step output is missing {key!r}; received keys {sorted(map(str, keys))}"
            )
    check_batch(out[DataKeys.OBS], observation_spec, num_envs, f"{env_name}.step output 'obs'")
    if DataKeys.FINAL_OBS in keys:
        check_batch(
            out[DataKeys.FINAL_OBS], observation_spec, num_envs, f"{env_name}.step output 'final_obs'"
        )
    _check_column(out, DataKeys.REWARDS, num_envs, lambda d: d.is_floating_point, "floating-point", env_name)
    for key in (DataKeys.TERMINATED, DataKeys.TRUNCATED):
        if key in keys:
            _check_column(out, key, num_envs, lambda d: d == torch.bool, "bool", env_name)
    if (DataKeys.TERMINATED in keys) != (DataKeys.TRUNCATED in keys):
        raise EnvOutputError(
            f"{env_name}.step returns only one of 'terminated'/'truncated'; return both"
            " (all False where it never happens)"
        )


def check_actions(actions: Any, action_spec: Spec, num_envs: int) -> None:
    """Sampled actions must fit the action spec (data read once, at the first step).

    Values are checked for discrete specs only: an unsquashed Gaussian over a
    Bounded spec legitimately samples outside the bounds, and the env clips
    (as in rl8 and Gymnasium).
    """
    try:
        action_spec.assert_is_in(
            actions, key="policy actions", check_values=isinstance(action_spec, Categorical)
        )
    except SpecError as e:
        raise EnvOutputError(f"{e} (check the model's output size and distribution_cls)") from None
    if actions.shape[0] != num_envs:
        raise EnvOutputError(f"policy actions: expected batch {num_envs}, received {list(actions.shape)}")


def _leaves(name: str, value: torch.Tensor | TensorDict) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, TensorDict):
        return [
            (f"{name}.{'.'.join(k) if isinstance(k, tuple) else k}", v)
            for k, v in value.items(include_nested=True, leaves_only=True)
        ]
    return [(name, value)]


def assert_finite(named: dict[str, torch.Tensor | TensorDict], *, env_name: str) -> None:
    """Raise :class:`NonFiniteError` if any ``[N, T, ...]`` entry holds NaN or Inf.

    One host sync when everything is finite; the message names the entry, the
    env copies and the time steps affected otherwise.
    """
    leaves = [leaf for name, value in named.items() for leaf in _leaves(name, value)]
    leaves = [(n, v) for n, v in leaves if v.is_floating_point() and v.numel()]
    if not leaves:
        return
    # min and max propagate NaN and show +-Inf: no [N, T, ...] temporaries
    # (isfinite would build float and bool copies of the whole buffer).
    flags = torch.stack([torch.isfinite(torch.stack(extrema(v))).all() for _, v in leaves])
    if bool(flags.all()):
        return
    for (name, value), ok in zip(leaves, flags.tolist()):
        if ok:
            continue
        bad = ~torch.isfinite(value)
        while bad.ndim > 2:
            bad = bad.any(-1)
        copies = bad.any(1).nonzero().flatten().tolist()
        steps = bad.any(0).nonzero().flatten().tolist()
        raise NonFiniteError(
            f"{env_name} produced non-finite {name!r} (NaN or Inf) in env copies"
            f" {copies[:10]}{'...' if len(copies) > 10 else ''} at time steps"
            f" {steps[:10]}{'...' if len(steps) > 10 else ''}; training stopped before"
            " updating the policy"
        )


def dry_run(env: Any, policy: Any, num_envs: int, inputs: Any = None) -> None:
    """Reset ``env``, act once with ``policy`` and step once, checking every output's keys,
    shapes, dtypes, bounds and finiteness; raise an error naming the culprit.

    ``inputs`` maps the reset's observations to the model's input (e.g. windows of past
    observations, all padding but the current one); default: the observations."""
    name = type(env).__name__
    with torch.inference_mode():
        obs = env.reset()
        check_batch(obs, env.observation_spec, num_envs, f"{name}.reset output")
        env.observation_spec.assert_is_in(obs, key=f"{name}.reset output")
        model_input = obs if inputs is None else inputs(obs)
        if policy.recurrent:
            actions, logp, values, _ = policy.act_recurrent(model_input, policy.init_states(num_envs))
        else:
            actions, logp, values = policy.act(model_input)
        check_actions(actions, env.action_spec, num_envs)
        for key, value in ((DataKeys.LOGP, logp), (DataKeys.VALUES, values)):
            if tuple(value.shape) != (num_envs, 1):
                raise ValueError(
                    f"policy {key!r}: expected shape [{num_envs}, 1], received {list(value.shape)}"
                )
        out = env.step(actions)
        check_step_output(out, env.observation_spec, num_envs, name)
        env.observation_spec.assert_is_in(out[DataKeys.OBS], key=f"{name}.step output 'obs'")
        assert_finite(
            {DataKeys.OBS: out[DataKeys.OBS][:, None], DataKeys.REWARDS: out[DataKeys.REWARDS]},
            env_name=name,
        )
