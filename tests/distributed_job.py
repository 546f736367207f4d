"""Jobs ``tests/test_distributed.py`` starts under ``torchrun`` (one mode per launch).

    torchrun --standalone --nproc_per_node=2 tests/distributed_job.py MODE OUT [ARGS...]

Every rank writes what the test checks to ``OUT.rank<k>.pt`` (rank 0 also ``OUT``).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import torch
import torch.distributed as dist

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.data import DataKeys
from rl8lite.examples import CartPole

#: Hyperparameters of the equivalence check (the test builds the one-process reference).
EQUIVALENCE: dict[str, dict[str, Any]] = {
    "whole_buffer": {"num_sgd_iters": 3, "target_kl_div": 0.02},
    "accumulated": {"num_sgd_iters": 2, "accumulate_grads": True, "sgd_minibatch": 64, "update_chunk_size": 24},
    "normalized": {"num_sgd_iters": 2, "normalize_observations": True},  # moments pooled over ranks
}
COMMON = {"horizon": 16, "model_config": {"hiddens": [16, 16]}, "env_config": {"max_episode_steps": 12}}
TRAINER = {"num_envs": 8, "horizon": 16, "seed": 3, "sgd_minibatch_size": 64, "num_sgd_iters": 2,
           "model_config": {"hiddens": [16]}}


def equivalence_config(name: str, num_envs: int) -> dict[str, Any]:
    """``EQUIVALENCE[name]`` for ``num_envs`` copies per process (``sgd_minibatch`` is per copy)."""
    config = dict(EQUIVALENCE[name])
    per_copy = config.pop("sgd_minibatch", None)
    if per_copy is not None:
        config["sgd_minibatch_size"] = per_copy * num_envs // 16
    return {**COMMON, **config, "num_envs": num_envs, "seed": 0}


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def gathered_equal(tensor: torch.Tensor) -> bool:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return all(torch.equal(parts[0], p) for p in parts[1:])


def flat_state(algo: Algorithm) -> torch.Tensor:
    optimizer = [v.reshape(-1).double() for s in algo.optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor)]
    policy = [t.detach().reshape(-1).double() for t in (*algo.policy.parameters(), *algo.policy.buffers())]
    return torch.cat(policy + optimizer)


def equivalence(out: str, reference_file: str) -> None:
    """Each rank updates from its half of the one-process reference's buffer."""
    reference = torch.load(reference_file, weights_only=True)
    results = {}
    for name in EQUIVALENCE:
        ref = reference[name]
        half = ref["num_envs"] // 2
        algo = Algorithm(CartPole, **equivalence_config(name, half))
        algo.policy.load_state_dict(ref["initial_params"])
        copies = slice(rank() * half, (rank() + 1) * half)
        for key in algo.buffer.keys():
            algo.buffer[key].copy_(ref["buffer"][key][copies])
        algo.state.reward_scale = ref["reward_scale"]
        algo.state.buffered = True
        stats = algo.step()
        results[name] = {"params": {k: v.clone() for k, v in algo.policy.state_dict().items()}, "stats": stats,
                         "ranks_equal": gathered_equal(flat_state(algo))}
    # real iterations: different env copies and samples on each rank, parameters in step
    algo = Algorithm(CartPole, num_envs=8, horizon=16, seed=1, sgd_minibatch_size=32, update_chunk_size=24,
                     collect_chunk_size=5, target_kl_div=0.05, normalize_observations=True)
    for _ in range(3):
        collect = algo.collect()
        algo.step()
    first_actions = algo.buffer[DataKeys.ACTIONS][:, :16].reshape(-1).double()
    results["iterations"] = {"ranks_equal": gathered_equal(flat_state(algo)),
                             "actions_equal": gathered_equal(first_actions),
                             "returns_mean": collect["returns/mean"], "env_steps": collect["env/steps"]}
    write(out, results)


class FailsOnRank1(CartPole):
    """CartPole whose step raises on rank 1 from the 20th step on."""

    def step(self, action: torch.Tensor) -> Any:
        self.calls = getattr(self, "calls", 0) + 1
        if rank() == 1 and self.calls >= 20:
            raise ValueError("the env broke on purpose")
        return super().step(action)


class SignalOnRank1(HitsUpperBound):
    """Stops at ``algorithm/steps`` 6; on rank 1 sends SIGTERM to its own process at step 2."""

    def __init__(self) -> None:
        super().__init__("algorithm/steps", 6)

    def __call__(self, stats: dict[str, float]) -> bool:
        if rank() == 1 and stats["algorithm/steps"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().__call__(stats)


def trainer_job(out: str, mode: str, args: list[str]) -> None:
    if mode == "resume":
        trainer = Trainer.from_checkpoint(args[0], progress=False, save_policy=False)
        steps = 5
    else:
        env = FailsOnRank1 if mode == "fail" else CartPole
        trainer = Trainer(Algorithm(env, **TRAINER), experiment_name=os.environ["EXPERIMENT"], progress=False,
                          save_policy=False)
        steps = int(args[0]) if args else 5
    stop = SignalOnRank1() if mode == "signal" else HitsUpperBound("algorithm/steps", steps)
    try:
        trainer.run(stop_conditions=[stop], checkpoint_every=3)
    finally:
        write(out, {"steps": trainer.state["algorithm/steps"], "env_steps": trainer.state["env/steps"],
                    "run_id": getattr(trainer.tracker, "run_id", None),
                    "params": {k: v.clone() for k, v in trainer.algorithm.policy.state_dict().items()}})


def gymnasium_job(out: str, mode: str) -> None:
    """A Gymnasium env per rank (``mode``: its vectorization mode): seeds, equal parameters,
    and no worker process left once the trainer is closed."""
    import multiprocessing

    from rl8lite.env import gymnasium_env

    algo = Algorithm(gymnasium_env("CartPole-v1", vectorization_mode=mode, seed=5), num_envs=4, horizon=8, seed=3)
    seeds = []
    with Trainer(algo, experiment_name=os.environ["EXPERIMENT"], progress=False, save_policy=False) as trainer:
        trainer.step()
        seeds = list(algo.env.vector_env.get_attr("np_random_seed"))
        trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
        params_equal = gathered_equal(flat_state(algo))
    write(out, {"seeds": seeds, "params_equal": params_equal, "env_steps": trainer.state["env/steps"],
                "workers_left": len(multiprocessing.active_children())})


def write(out: str, payload: dict[str, Any]) -> None:
    torch.save(payload, f"{out}.rank{rank()}.pt")


def main() -> None:
    torch.set_num_threads(1)
    mode, out, *args = sys.argv[1:]
    if mode == "equivalence":
        equivalence(out, args[0])
    elif mode == "mismatch":  # rank 1 is given another num_envs
        Algorithm(CartPole, num_envs=8 if rank() == 0 else 6, horizon=4)
    elif mode == "gymnasium":
        gymnasium_job(out, args[0])
    else:
        trainer_job(out, mode, args)


if __name__ == "__main__":
    main()
