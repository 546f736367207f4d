"""rl8lite on Atari against a CleanRL-style plain-torch loop and Stable-Baselines3's PPO, with
CleanRL's ``ppo_atari_envpool.py`` settings, on one torch thread.

Every side trains envpool's Breakout-v5 (``episodic_life=True, reward_clip=True``, 4 stacked
84x84 gray frames, envpool on one thread) with the same work per update: 8 copies x 128 steps,
4 epochs of 4 minibatches of 256, the Nature CNN (shared trunk, actor and critic heads, CleanRL's
orthogonal initialisation), Adam lr 2.5e-4 eps 1e-5, gamma 0.99, lambda 0.95, clip 0.1, value
clip 0.1, value coefficient 0.5, entropy 0.01, grad norm 0.5, advantages normalised per
minibatch (CleanRL, SB3) or per buffer (rl8lite). The sides:

- ``rl8lite``: ``Algorithm(envpool_env("Breakout-v5", ...), ...)``, float32; ``rl8lite_amp`` the
  same with ``enable_amp=True`` (the update under bf16 autocast);
- ``loop``: CleanRL's loop written out in this file (a float32 observation buffer on the torch
  side, a forward per step, GAE, the minibatch passes): the framework-free reference;
- ``sb3``: ``PPO("CnnPolicy", ...)`` over the same envpool through a small SB3 ``VecEnv``;
- ``env``: envpool alone, stepped with random actions, the other part of every side's floor;
- ``math_*``: the network's arithmetic alone (no env, no buffer, no losses), in NCHW as the loop
  and SB3 lay frames out, channels-last as rl8lite does, and channels-last under bf16 autocast:
  the floor under each side's time. ``floor_over_rl8lite`` is the share of rl8lite's time that
  its floor (the network's math plus ``env``, one after the other) is, and
  ``loop_over_floor_of_rl8lite`` the most any trainer of this network, stepping the env between
  forwards as PPO does, can reach against the loop.

A finished copy's next episode starts in the same step on the rl8lite and SB3 sides (envpool's
reset step is taken at once, its frame is the next observation); CleanRL's loop keeps envpool's
own next-step reset, one step of each episode whose action is ignored. Timed: ``--updates``
updates (collect + update) after one untimed warm-up per side, repeats interleaved in rotating
order. Also: the rollout buffer's observation bytes on each side, and rl8lite's with one frame
per step stacked by a view requirement (``stack_num=1``, ``model_config={"frame_stack": 4}``).

Usage (``pip install -e '.[bench,atari]'``):
    python benchmarks/atari.py --updates 3 --repeats 3 --json benchmarks/results/atari.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

from rl8lite import Algorithm
from rl8lite.env import envpool_env

FLOORS = {"env": lambda u, s: env_side(u, s),
          "math_nchw": lambda u, s: network_math_side(u, s, channels_last=False),
          "math_channels_last": lambda u, s: network_math_side(u, s, channels_last=True),
          "math_channels_last_amp": lambda u, s: network_math_side(u, s, channels_last=True, amp=True)}
NUM_ENVS, HORIZON, MINIBATCH, EPOCHS = 8, 128, 256, 4
POOL = {"episodic_life": True, "reward_clip": True, "num_threads": 1}
RL8LITE = {"num_envs": NUM_ENVS, "horizon": HORIZON, "sgd_minibatch_size": MINIBATCH,
           "num_sgd_iters": EPOCHS, "optimizer_config": {"lr": 2.5e-4, "eps": 1e-5},
           "clip_param": 0.1, "vf_clip_param": 0.1, "vf_coeff": 0.5, "entropy_coeff": 0.01,
           "max_grad_norm": 0.5, "normalize_rewards": False, "device": "cpu"}


def rl8lite_side(updates: int, seed: int, amp: bool = False) -> dict[str, float]:
    algo = Algorithm(envpool_env("Breakout-v5", **POOL, seed=seed), **RL8LITE, enable_amp=amp,
                     seed=seed)
    algo.collect()
    algo.step()
    start = time.perf_counter()
    for _ in range(updates):
        algo.collect()
        algo.step()
    seconds = time.perf_counter() - start
    obs_bytes = algo.buffer["obs"].numel() * algo.buffer["obs"].element_size()
    algo.close()
    return {"seconds": seconds, "obs_bytes": obs_bytes}


def layer(module: nn.Module, std: float = float(np.sqrt(2))) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


class Agent(nn.Module):
    """CleanRL's Atari agent: the Nature CNN trunk, a categorical actor, a critic."""

    def __init__(self, actions: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(), layer(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(), layer(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(), nn.Flatten(),
            layer(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
        self.actor, self.critic = layer(nn.Linear(512, actions), 0.01), layer(nn.Linear(512, 1), 1)

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        hidden = self.network(x / 255.0)
        dist = torch.distributions.Categorical(logits=self.actor(hidden))
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden)


def loop_side(updates: int, seed: int) -> dict[str, float]:
    import envpool

    torch.manual_seed(seed)
    envs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=NUM_ENVS, batch_size=NUM_ENVS,
                        seed=seed, **POOL)
    agent = Agent(envs.action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs = torch.zeros((HORIZON, NUM_ENVS, 4, 84, 84))
    actions, logprobs, rewards, dones, values = (torch.zeros(HORIZON, NUM_ENVS) for _ in range(5))
    next_obs, next_done = torch.tensor(envs.reset()[0], dtype=torch.float32), torch.zeros(NUM_ENVS)

    def update() -> None:
        nonlocal next_obs, next_done
        for step in range(HORIZON):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
            values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
            frames, reward, terminated, truncated, _ = envs.step(action.numpy())
            rewards[step] = torch.from_numpy(reward)
            next_obs = torch.tensor(frames, dtype=torch.float32)
            next_done = torch.from_numpy(terminated | truncated).float()
        with torch.no_grad():  # GAE
            next_value = agent.act(next_obs)[3].reshape(1, -1)
            advantages, last = torch.zeros_like(rewards), 0
            for t in reversed(range(HORIZON)):
                not_done = 1.0 - (next_done if t == HORIZON - 1 else dones[t + 1])
                after = next_value if t == HORIZON - 1 else values[t + 1]
                delta = rewards[t] + 0.99 * after * not_done - values[t]
                advantages[t] = last = delta + 0.99 * 0.95 * not_done * last
            returns = advantages + values
        b_obs, b_logprobs, b_actions = obs.reshape(-1, 4, 84, 84), logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)
        for _ in range(EPOCHS):
            order = torch.randperm(HORIZON * NUM_ENVS)
            for start in range(0, HORIZON * NUM_ENVS, MINIBATCH):
                mb = order[start:start + MINIBATCH]
                _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions.long()[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                adv = b_advantages[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.9, 1.1)).mean()
                newvalue = newvalue.view(-1)
                clipped = b_values[mb] + (newvalue - b_values[mb]).clamp(-0.1, 0.1)
                v_loss = 0.5 * torch.max((newvalue - b_returns[mb]) ** 2, (clipped - b_returns[mb]) ** 2).mean()
                loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()

    update()
    start = time.perf_counter()
    for _ in range(updates):
        update()
    seconds = time.perf_counter() - start
    envs.close()
    return {"seconds": seconds, "obs_bytes": obs.numel() * obs.element_size()}


def network_math_side(updates: int, seed: int, channels_last: bool, amp: bool = False) -> dict:
    """The network's arithmetic alone, the floor under any side's time: per update 16 minibatch
    forward+backward passes and Adam steps at 256 frames, 129 inference forwards at 8 frames,
    on random frames, in NCHW (the loop's and SB3's layout) or channels-last (rl8lite's)."""
    torch.manual_seed(seed)
    layout = torch.channels_last if channels_last else torch.contiguous_format
    agent = Agent(4).to(memory_format=layout)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    frames = torch.randint(0, 256, (MINIBATCH, 4, 84, 84)).float().contiguous(memory_format=layout)
    actions = torch.randint(0, 4, (MINIBATCH,))

    def update() -> None:
        with torch.inference_mode():
            for _ in range(HORIZON + 1):
                agent.act(frames[:NUM_ENVS])
        for _ in range(EPOCHS * HORIZON * NUM_ENVS // MINIBATCH):
            with torch.autocast("cpu", torch.bfloat16, enabled=amp):
                _, logprob, entropy, value = agent.act(frames, actions)
            optimizer.zero_grad()
            (logprob.mean() + entropy.mean() + value.float().mean()).backward()
            optimizer.step()

    update()
    start = time.perf_counter()
    for _ in range(updates):
        update()
    return {"seconds": time.perf_counter() - start, "obs_bytes": 0}


def env_side(updates: int, seed: int) -> dict:
    """envpool alone: an update's 1,024 steps of uniformly random actions (envpool's resets)."""
    import envpool

    pool = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=NUM_ENVS, batch_size=NUM_ENVS,
                        seed=seed, **POOL)
    rng = np.random.default_rng(seed)
    pool.reset()
    start = time.perf_counter()
    for _ in range(updates * HORIZON):
        pool.step(rng.integers(0, pool.action_space.n, NUM_ENVS))
    seconds = time.perf_counter() - start
    pool.close()
    return {"seconds": seconds, "obs_bytes": 0}


def sb3_side(updates: int, seed: int) -> dict[str, float]:
    import envpool
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecEnv

    class EnvpoolVecEnv(VecEnv):
        """envpool as an SB3 vector env, a finished copy's next episode started at once."""

        def __init__(self, pool) -> None:
            self.pool = pool
            super().__init__(NUM_ENVS, pool.observation_space, pool.action_space)

        def reset(self) -> np.ndarray:
            return self.pool.reset()[0]

        def step_async(self, actions: np.ndarray) -> None:
            self.actions = actions

        def step_wait(self):
            obs, rewards, terminated, truncated, _ = self.pool.step(self.actions)
            done = terminated | truncated
            infos = [{} for _ in range(NUM_ENVS)]
            if done.any():
                ids = np.flatnonzero(done).astype(np.int32)
                first, *_, info = self.pool.step(np.zeros(len(ids), dtype=np.int64), env_id=ids)
                for i in ids:
                    infos[i] = {"terminal_observation": obs[i], "TimeLimit.truncated": bool(truncated[i] and not terminated[i])}
                obs = obs.copy()
                obs[info["env_id"]] = first
            return obs, rewards, done, infos

        def close(self) -> None:
            self.pool.close()

        def get_attr(self, name, indices=None):
            return [None] * NUM_ENVS

        def set_attr(self, name, value, indices=None) -> None:
            pass

        def env_method(self, name, *args, indices=None, **kwargs):
            return [None] * NUM_ENVS

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False] * NUM_ENVS

        def seed(self, seed=None):
            return [None] * NUM_ENVS

    pool = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=NUM_ENVS, batch_size=NUM_ENVS,
                        seed=seed, **POOL)
    model = PPO("CnnPolicy", EnvpoolVecEnv(pool), n_steps=HORIZON, batch_size=MINIBATCH, n_epochs=EPOCHS,
                learning_rate=2.5e-4, clip_range=0.1, clip_range_vf=0.1, ent_coef=0.01, vf_coef=0.5,
                max_grad_norm=0.5, gae_lambda=0.95, gamma=0.99, device="cpu", seed=seed,
                policy_kwargs={"optimizer_kwargs": {"eps": 1e-5}})
    model.learn(NUM_ENVS * HORIZON)
    start = time.perf_counter()
    model.learn(updates * NUM_ENVS * HORIZON, reset_num_timesteps=False)
    seconds = time.perf_counter() - start
    obs_bytes = model.rollout_buffer.observations.nbytes
    pool.close()
    return {"seconds": seconds, "obs_bytes": obs_bytes}


def view_stacked_obs_bytes() -> dict[str, int]:
    """rl8lite's observation bytes with envpool's stacking, and with one frame per step stacked
    by the model's view requirement (the windows' store included)."""
    stacked = Algorithm(envpool_env("Breakout-v5", **POOL), **RL8LITE)
    single = Algorithm(envpool_env("Breakout-v5", **POOL, stack_num=1), **RL8LITE,
                       model_config={"frame_stack": 4})
    return {name: int(algo.memory_stats()["memory/buffer_bytes"])
            for name, algo in (("env_stacked_buffer", stacked), ("view_stacked_buffer", single))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sides", nargs="+", default=["rl8lite", "rl8lite_amp", "loop", "sb3",
                                                       *FLOORS])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sides = {"rl8lite": rl8lite_side, "rl8lite_amp": lambda u, s: rl8lite_side(u, s, amp=True),
             "loop": loop_side, "sb3": sb3_side, **FLOORS}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.sides}
    for repeat in range(args.repeats):
        order = args.sides[repeat % len(args.sides):] + args.sides[: repeat % len(args.sides)]
        for name in order:
            runs[name].append(sides[name](args.updates, repeat))
            print(f"repeat {repeat} {name}: {runs[name][-1]['seconds']:.1f} s", flush=True)
    steps = args.updates * NUM_ENVS * HORIZON
    output: dict = {"env_steps_per_repeat": steps, "env_steps_per_s": {}, "ratios": {},
                    "obs_bytes": {name: done[0]["obs_bytes"] for name, done in runs.items()
                                  if name not in FLOORS}}
    for name, done in runs.items():
        output["env_steps_per_s"][name] = spread([steps / run["seconds"] for run in done])
        print(f"{name}: median {output['env_steps_per_s'][name]['median']:,.0f} env steps/s,"
              f" observations {output['obs_bytes'].get(name, 0) / 2**20:.1f} MiB", flush=True)
    for ours in ("rl8lite", "rl8lite_amp", *FLOORS):
        for peer in ("loop", "sb3"):
            if ours in runs and peer in runs:
                ratio = spread([p["seconds"] / o["seconds"] for o, p in zip(runs[ours], runs[peer])])
                output["ratios"][f"{peer}_over_{ours}"] = ratio
                print(f"{peer} time / {ours} time: min {ratio['min']:.2f} median {ratio['median']:.2f}"
                      f" max {ratio['max']:.2f}", flush=True)
    for ours, floor in (("rl8lite", "math_channels_last"), ("rl8lite_amp", "math_channels_last_amp")):
        if {ours, floor, "env", "loop"} <= runs.keys():  # the floor: network math + env, serially
            floors = [f["seconds"] + e["seconds"] for f, e in zip(runs[floor], runs["env"])]
            output["ratios"][f"floor_over_{ours}"] = spread(
                [f / o["seconds"] for o, f in zip(runs[ours], floors)])
            output["ratios"][f"loop_over_floor_of_{ours}"] = spread(
                [p["seconds"] / f for p, f in zip(runs["loop"], floors)])
            print(f"loop time / {ours}'s floor: {output['ratios'][f'loop_over_floor_of_{ours}']}")
    output["seconds"] = {name: [run["seconds"] for run in done] for name, done in runs.items()}
    output["frame_stacking"] = view_stacked_obs_bytes()
    print(f"buffer bytes: {output['frame_stacking']}", flush=True)
    if args.json:
        write_results(args.json, output)


if __name__ == "__main__":
    main()
