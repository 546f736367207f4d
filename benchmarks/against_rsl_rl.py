"""rl8lite side by side with rsl_rl (Isaac Lab's default PPO) on one env class, one torch thread.

Both train rl8lite's batched CartPole (``rl8lite.examples.CartPole``; rsl_rl sees it
through its ``VecEnv`` interface, :class:`CartPoleVecEnv`) with the same math: 32 steps
per env copy per iteration, 4 whole-buffer Adam steps (lr 1e-3), separate 2x64 tanh actor
and critic MLPs, a categorical action head, GAE (gamma 0.99, lambda 0.95) with advantages
normalised over the whole buffer, clip 0.2, entropy coefficient 0.01, gradient-norm
clipping at 1.0, no observation or reward normalisation, no adaptive learning rate, no
value clipping. rsl_rl's value loss is ``coef * mean((V - R)^2)`` and rl8lite's
``vf_coeff * 0.5 * mean((V - R)^2)``: rsl_rl's coefficient is rl8lite's halved.

rsl_rl runs as its users run it: ``OnPolicyRunner.learn`` (its own loop; no log
directory, so no TensorBoard writes and no episode bookkeeping) for a full iteration; a
collect is the runner's rollout loop (``act``, ``env.step``, its NaN check,
``process_env_step``, ``compute_returns``) without the update. rl8lite runs
``Algorithm.collect()`` and ``Algorithm.step()``.

Differences that remain (each is how the library works, not a setting):

- rsl_rl 5.5.1 has no categorical distribution: :class:`Categorical` adds one through its
  ``Distribution`` interface (``torch.distributions.Categorical`` on the MLP's logits).
- rsl_rl bootstraps a time-limit truncation with the value of the observation before the
  step (``r += gamma * V(s_t)``); rl8lite with the value of the final observation
  (one extra critic pass over the truncated copies).
- rsl_rl draws a permutation and gathers the whole buffer every epoch even with one
  minibatch; rl8lite reads the buffer in place (no permutation with one minibatch).
- rsl_rl clips the actor's and the critic's gradient norms separately, rl8lite the
  whole gradient's; rsl_rl's Adam is torch's default (foreach), rl8lite's the fused one.
- rl8lite computes its collect statistics (episode returns and lengths, reward stats)
  and checks the env's outputs every step; rsl_rl's runner, without a log directory, only
  checks for NaN.

Usage:
    python benchmarks/against_rsl_rl.py                           # 8, 256, 1024, 4096 envs
    python benchmarks/against_rsl_rl.py --envs 8 256 --repeats 3 --json benchmarks/results/rsl_rl.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rl8lite import Algorithm
from rl8lite.examples import CartPole

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results  # noqa: E402
from timing import spread  # noqa: E402

try:
    from rsl_rl.algorithms import PPO
    from rsl_rl.env import VecEnv
    from rsl_rl.models import MLPModel
    from rsl_rl.modules.distribution import Distribution
    from rsl_rl.runners import OnPolicyRunner
    from rsl_rl.utils.utils import check_nan
except ImportError:  # pragma: no cover - the bench extra is optional
    sys.exit("rsl_rl is not installed: pip install -c constraints.txt -e '.[bench]'")

HORIZON, PASSES, HIDDENS, LR = 32, 4, [64, 64], 1e-3
RL8LITE_CONFIG: dict[str, Any] = {
    "horizon": HORIZON, "num_sgd_iters": PASSES, "sgd_minibatch_size": None, "optimizer_config": {"lr": LR},
    "model_config": {"hiddens": HIDDENS, "activation": "tanh"}, "gamma": 0.99, "gae_lambda": 0.95,
    "clip_param": 0.2, "entropy_coeff": 0.01, "vf_coeff": 0.5, "max_grad_norm": 1.0, "vf_clip_param": None,
    "normalize_rewards": False, "normalize_advantages": True, "horizons_per_env_reset": -1,
}


class Categorical(Distribution):
    """A categorical head for rsl_rl's models: the MLP's outputs are the logits; an action is
    one index, stored as a float ``[B, 1]`` (rsl_rl's action storage is float)."""

    def __init__(self, output_dim: int, num_categories: int = 2) -> None:
        super().__init__(output_dim)
        self.num_categories = num_categories
        self._distribution: torch.distributions.Categorical | None = None

    def update(self, mlp_output: torch.Tensor) -> None:
        self._distribution = torch.distributions.Categorical(logits=mlp_output, validate_args=False)

    def sample(self) -> torch.Tensor:
        return self._distribution.sample().unsqueeze(-1).float()  # type: ignore[union-attr]

    def deterministic_output(self, mlp_output: torch.Tensor) -> torch.Tensor:
        return mlp_output.argmax(-1, keepdim=True).float()

    @property
    def input_dim(self) -> int:
        return self.num_categories

    @property
    def mean(self) -> torch.Tensor:
        return self._distribution.probs  # type: ignore[union-attr]

    @property
    def std(self) -> torch.Tensor:
        return self._distribution.probs  # type: ignore[union-attr]  # only logged by the runner

    @property
    def entropy(self) -> torch.Tensor:
        return self._distribution.entropy()  # type: ignore[union-attr]

    @property
    def params(self) -> tuple[torch.Tensor, ...]:
        return (self._distribution.logits,)  # type: ignore[union-attr]

    def log_prob(self, outputs: torch.Tensor) -> torch.Tensor:
        return self._distribution.log_prob(outputs.squeeze(-1).long())  # type: ignore[union-attr]

    def kl_divergence(self, old_params: tuple[torch.Tensor, ...], new_params: tuple[torch.Tensor, ...]) -> torch.Tensor:
        old, new = (torch.distributions.Categorical(logits=p[0]) for p in (old_params, new_params))
        return torch.distributions.kl_divergence(old, new)


class CartPoleVecEnv(VecEnv):
    """rl8lite's batched CartPole behind rsl_rl's ``VecEnv``: observations under ``"policy"``,
    ``dones`` = terminated or truncated, truncations as ``extras["time_outs"]``."""

    def __init__(self, num_envs: int) -> None:
        self.env = CartPole(num_envs, HORIZON)
        self.num_envs, self.num_actions = num_envs, 1
        self.max_episode_length = CartPole.max_episode_steps
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.device, self.cfg = "cpu", {}
        self.obs = self.env.reset()

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        out = self.env.step(actions.long())
        self.obs = out["obs"]
        truncated = out["truncated"][:, 0]
        dones = out["terminated"][:, 0] | truncated
        return self.get_observations(), out["rewards"][:, 0], dones, {"time_outs": truncated}


def rsl_rl_config() -> dict[str, Any]:
    return {
        "num_steps_per_env": HORIZON, "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "save_interval": 10**9, "multi_gpu": None,
        "algorithm": {
            "class_name": PPO, "num_learning_epochs": PASSES, "num_mini_batches": 1, "clip_param": 0.2,
            "gamma": 0.99, "lam": 0.95, "value_loss_coef": 0.25, "entropy_coef": 0.01, "learning_rate": LR,
            "max_grad_norm": 1.0, "use_clipped_value_loss": False, "schedule": "fixed", "desired_kl": None,
            "normalize_advantage_per_mini_batch": False,
        },
        "actor": {"class_name": MLPModel, "hidden_dims": HIDDENS, "activation": "tanh",
                  "distribution_cfg": {"class_name": Categorical, "num_categories": 2}},
        "critic": {"class_name": MLPModel, "hidden_dims": HIDDENS, "activation": "tanh"},
    }


class RslRl:
    """rsl_rl's runner on :class:`CartPoleVecEnv`."""

    def __init__(self, num_envs: int) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints both models
            self.runner = OnPolicyRunner(CartPoleVecEnv(num_envs), rsl_rl_config(), log_dir=None, device="cpu")

    def iteration(self) -> None:
        self.runner.learn(num_learning_iterations=1)

    def collect(self) -> None:
        """The runner's rollout loop (``OnPolicyRunner.learn``) without the update."""
        alg, env = self.runner.alg, self.runner.env
        obs = env.get_observations()
        with torch.inference_mode():
            for _ in range(HORIZON):
                actions = alg.act(obs)
                obs, rewards, dones, extras = env.step(actions)
                check_nan(obs, rewards, dones)
                alg.process_env_step(obs, rewards, dones, extras)
            alg.compute_returns(obs)
        alg.storage.clear()


class Rl8lite:
    def __init__(self, num_envs: int) -> None:
        self.algo = Algorithm(CartPole, num_envs=num_envs, seed=0, **RL8LITE_CONFIG)

    def iteration(self) -> None:
        self.algo.collect()
        self.algo.step()

    def collect(self) -> None:
        self.algo.collect()


def measure(num_envs: int, repeats: int, iterations: int) -> dict[str, Any]:
    """Env steps per second of each side, full iterations and collects, repeats interleaved
    (the side that goes first alternates)."""
    sides = {"rl8lite": Rl8lite(num_envs), "rsl_rl": RslRl(num_envs)}
    steps = num_envs * HORIZON * iterations
    rates: dict[str, dict[str, list[float]]] = {s: {"iteration": [], "collect": []} for s in sides}
    for side in sides.values():  # warm-up: allocator, first-step checks
        side.iteration()
        side.collect()
    names = list(sides)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            for phase in ("iteration", "collect"):
                run = getattr(sides[name], phase)
                start = time.perf_counter()
                for _ in range(iterations):
                    run()
                rates[name][phase].append(steps / (time.perf_counter() - start))
    out: dict[str, Any] = {"num_envs": num_envs, "repeats": repeats, "iterations_per_repeat": iterations}
    for name in names:
        out[name] = {phase: spread(r) for phase, r in rates[name].items()}
    out["ratio_rl8lite_over_rsl_rl"] = {
        phase: spread([a / b for a, b in zip(rates["rl8lite"][phase], rates["rsl_rl"][phase])])
        for phase in ("iteration", "collect")
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=0,
                        help="iterations per repeat (default: enough for ~65k env steps, at least 1)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for num_envs in args.envs:
        iterations = args.iterations or max(1, 65536 // (num_envs * HORIZON))
        r = measure(num_envs, args.repeats, iterations)
        results.append(r)
        for phase in ("iteration", "collect"):
            ratio = r["ratio_rl8lite_over_rsl_rl"][phase]
            print(f"{num_envs:5d} envs {phase:9s}  rl8lite {r['rl8lite'][phase]['median']:10,.0f}  rsl_rl"
                  f" {r['rsl_rl'][phase]['median']:10,.0f} env steps/s (median)  rl8lite / rsl_rl"
                  f" {ratio['min']:.2f} / {ratio['median']:.2f} / {ratio['max']:.2f} (min/median/max)", flush=True)
    if args.json is not None:
        write_results(args.json, {"config": {"rl8lite": RL8LITE_CONFIG, "rsl_rl": "rsl_rl_config() in against_rsl_rl.py"},
                                  "results": results})


if __name__ == "__main__":
    main()
