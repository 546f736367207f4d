"""rl8lite side by side with rsl_rl 5.5.1 (Isaac Lab's default PPO): one env class, the same math.

Both train rl8lite's batched CartPole (``rl8lite.examples.CartPole``; rsl_rl sees it
through its ``VecEnv`` interface, :class:`CartPoleVecEnv`) on one torch thread: 32 steps
per env copy per iteration, 4 whole-buffer Adam steps (lr 1e-3), separate 2x64 tanh actor
and critic MLPs with the same initialisation (orthogonal, gain sqrt 2 inside, 0.01 on the
actor's head, 1 on the critic's), a categorical action head, GAE (gamma 0.99, lambda
0.95) with advantages normalised over the whole buffer, clip 0.2, entropy coefficient
0.01, gradient-norm clipping at 1.0, no observation or reward normalisation, a fixed
learning rate and no value clipping. rsl_rl's value loss is ``coef * mean((V - R)^2)``,
rl8lite's ``vf_coeff * 0.5 * mean((V - R)^2)``: rsl_rl's coefficient (0.25) is rl8lite's
(0.5) halved.

What is timed, in env steps per second, repeats interleaved (the side that goes first
alternates), warm-up iterations and collects excluded:

- full iteration: rsl_rl's own loop, ``OnPolicyRunner.learn(n)`` with no log directory
  (its logger then writes nothing, keeps no episode statistics and stores no git state);
  rl8lite's ``Algorithm.collect()`` + ``Algorithm.step()``;
- collect: the span rsl_rl's runner reports as its collection time (``act``,
  ``env.step``, the NaN check, ``process_env_step``; ``compute_returns`` counts as its
  learning time); rl8lite's ``Algorithm.collect()``. GAE is in neither.

Differences that remain (how each library works, not settings):

- rsl_rl 5.5.1 ships Gaussian and Beta heads only: :class:`Categorical` adds one through
  its ``Distribution`` interface (``torch.distributions.Categorical`` on the logits).
- The adapter: rsl_rl wants a ``TensorDict`` of observations from every step and stores
  actions as floats (cast back to integers for the env).
- Time limits: rsl_rl adds ``gamma * V(s_t)`` (the observation before the step) to the
  reward of a truncated step; rl8lite bootstraps with ``V(final_obs)`` (one critic pass
  over the truncated copies' final observations in each collect).
- Collect: rsl_rl runs the critic at every step and checks the env's outputs for NaN at
  every step (host syncs); rl8lite runs the actor per step, the critic once over the
  whole buffer after the rollout (the bootstrap value included), checks finiteness once,
  and computes its collect statistics (episode returns and lengths, reward stats).
- Update: rsl_rl draws a permutation per update and gathers the whole buffer through it
  every epoch, even with one minibatch, and reads three losses back (``.item()``) per
  step; rl8lite reads the buffer in place, runs each whole-buffer step in chunks of 8192
  samples whose gradients add up to the same step (``update_chunk_size="auto"``: 1 chunk
  up to 256 envs, 4 at 1024, 16 at 4096), and reports losses, KL, clip fraction and
  explained variance.
- rsl_rl clips the actor's and the critic's gradient norms separately, rl8lite the whole
  gradient's; rsl_rl's Adam is torch's default, which on the CPU is the per-parameter
  loop (neither foreach nor fused), rl8lite's the fused one.
- Layers: rsl_rl's MLP is ``nn.Linear``/``nn.Tanh`` modules; rl8lite's computes tanh as
  ``2 * sigmoid(2x) - 1`` on AMD CPUs, where torch's tanh kernel is the slower (the same
  function within float rounding; ``rl8lite.models.default.TANH_VIA_SIGMOID``), calls its
  layers without module hooks and uses its own ``Linear``.
- rl8lite makes glibc's malloc keep freed memory (``tune_malloc``, process-wide): rsl_rl,
  in the same process, runs with it too.
- Both sides are seeded (0), but draw different random numbers: their episodes, and so
  the env's resets, differ.

Usage:
    python benchmarks/against_rsl_rl.py                           # 8, 256, 1024, 4096 envs
    python benchmarks/against_rsl_rl.py --envs 8 256 --repeats 3 --json benchmarks/results/rsl_rl.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rl8lite import Algorithm
from rl8lite.examples import CartPole

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

try:
    from rsl_rl.algorithms import PPO
    from rsl_rl.env import VecEnv
    from rsl_rl.models import MLPModel
    from rsl_rl.modules.distribution import Distribution
    from rsl_rl.runners import OnPolicyRunner
    from rsl_rl.utils.utils import check_nan
except ImportError:  # pragma: no cover - the bench extra is optional
    sys.exit("rsl_rl is not installed: pip install -c constraints.txt -e '.[bench]'")

HORIZON, PASSES, HIDDENS, LR, SEED = 32, 4, [64, 64], 1e-3, 0
PHASES = ("iteration", "collect")
RL8LITE_CONFIG: dict[str, Any] = {
    "horizon": HORIZON, "num_sgd_iters": PASSES, "sgd_minibatch_size": None, "optimizer_config": {"lr": LR},
    "model_config": {"hiddens": HIDDENS, "activation": "tanh"}, "gamma": 0.99, "gae_lambda": 0.95,
    "clip_param": 0.2, "entropy_coeff": 0.01, "vf_coeff": 0.5, "max_grad_norm": 1.0, "vf_clip_param": None,
    "normalize_rewards": False, "normalize_advantages": True, "horizons_per_env_reset": -1, "seed": SEED,
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

    def __init__(self, num_envs: int, device: str = "cpu") -> None:
        self.env = CartPole(num_envs, HORIZON, device=device)
        self.num_envs, self.num_actions = num_envs, 1
        self.max_episode_length = CartPole.max_episode_steps
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.device, self.cfg = device, {}
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
        "actor": {"class_name": MLPModel, "hidden_dims": HIDDENS, "activation": "tanh", "obs_normalization": False,
                  "distribution_cfg": {"class_name": Categorical, "num_categories": 2}},
        "critic": {"class_name": MLPModel, "hidden_dims": HIDDENS, "activation": "tanh", "obs_normalization": False},
    }


def jsonable(value: Any) -> Any:
    """``value`` with classes replaced by their qualified names (for the results file)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return value


class RslRl:
    """rsl_rl's runner on :class:`CartPoleVecEnv`, its models initialised as rl8lite's."""

    def __init__(self, num_envs: int, device: str = "cpu") -> None:
        torch.manual_seed(SEED)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints both models
            self.runner = OnPolicyRunner(CartPoleVecEnv(num_envs, device), rsl_rl_config(), log_dir=None, device=device)
        alg = self.runner.alg
        for model, head_gain in ((alg.actor, 0.01), (alg.critic, 1.0)):  # [Linear, Tanh, Linear, Tanh, Linear]
            model.mlp.init_weights([math.sqrt(2), None, math.sqrt(2), None, head_gain])

    def iterations(self, n: int) -> None:
        self.runner.learn(num_learning_iterations=n)

    def collects(self, n: int) -> None:
        """The rollout loop of ``OnPolicyRunner.learn`` (its collection time), without the update."""
        alg, env = self.runner.alg, self.runner.env
        obs = env.get_observations()
        for _ in range(n):
            with torch.inference_mode():
                for _ in range(HORIZON):
                    actions = alg.act(obs)
                    obs, rewards, dones, extras = env.step(actions)
                    check_nan(obs, rewards, dones)
                    alg.process_env_step(obs, rewards, dones, extras)
            alg.storage.clear()


class Rl8lite:
    def __init__(self, num_envs: int, device: str = "cpu", **options: Any) -> None:
        self.algo = Algorithm(CartPole, num_envs=num_envs, device=device, **{**RL8LITE_CONFIG, **options})

    def iterations(self, n: int) -> None:
        for _ in range(n):
            self.algo.collect()
            self.algo.step()

    def collects(self, n: int) -> None:
        for _ in range(n):
            self.algo.collect()


def measure(num_envs: int, repeats: int, iterations: int, warmup: int) -> dict[str, Any]:
    """Env steps per second of each side, full iterations and collects, and the ratio
    rl8lite / rsl_rl per repeat; the side that goes first alternates from repeat to repeat."""
    sides = {"rl8lite": Rl8lite(num_envs), "rsl_rl": RslRl(num_envs)}
    steps = num_envs * HORIZON * iterations
    rates: dict[str, dict[str, list[float]]] = {s: {p: [] for p in PHASES} for s in sides}
    for side in sides.values():  # warm-up: allocator, first-step checks
        side.iterations(warmup)
        side.collects(warmup)
    names = list(sides)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            for phase in PHASES:
                run = getattr(sides[name], phase + "s")
                start = time.perf_counter()
                run(iterations)
                rates[name][phase].append(steps / (time.perf_counter() - start))
    out: dict[str, Any] = {"num_envs": num_envs, "repeats": repeats, "iterations_per_repeat": iterations}
    for name in names:
        out[name] = {phase: spread(r) for phase, r in rates[name].items()}
    out["ratio_rl8lite_over_rsl_rl"] = {
        phase: spread([a / b for a, b in zip(rates["rl8lite"][phase], rates["rsl_rl"][phase])]) for phase in PHASES
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=0,
                        help="iterations (or collects) per repeat (default: enough for ~65k env steps, at least 1)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations and collects per side first")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"CartPole, horizon {HORIZON}, 2x64 tanh actor + critic, {PASSES} whole-buffer Adam steps, 1 torch thread,"
          f" {args.repeats} interleaved repeats.\nsteps/s are medians; ratios are rl8lite / rsl_rl per repeat,"
          " min / median / max (> 1: rl8lite faster).\n")
    header = f"{'envs':>6} | {'phase':>9} | {'rl8lite':>9} | {'rsl_rl':>9} | {'rl8lite / rsl_rl':>16}"
    print(header)
    print("-" * len(header))
    results = []
    for num_envs in args.envs:
        iterations = args.iterations or max(1, 65536 // (num_envs * HORIZON))
        r = measure(num_envs, args.repeats, iterations, args.warmup)
        results.append(r)
        for phase in PHASES:
            ratio = r["ratio_rl8lite_over_rsl_rl"][phase]
            print(f"{num_envs:>6} | {phase:>9} | {r['rl8lite'][phase]['median']:>9,.0f} |"
                  f" {r['rsl_rl'][phase]['median']:>9,.0f} |"
                  f" {ratio['min']:>4.2f} {ratio['median']:>4.2f} {ratio['max']:>4.2f}", flush=True)
    if args.json is not None:
        write_results(args.json, {"config": {"rl8lite": RL8LITE_CONFIG, "rsl_rl": jsonable(rsl_rl_config()),
                                             "warmup": args.warmup}, "results": results})


if __name__ == "__main__":
    main()
