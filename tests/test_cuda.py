"""CUDA graphs on a GPU: the captured collect and update compute what eager code computes, and the
rollout reads nothing back to the host. Skipped without CUDA (CI has no GPU)."""

from __future__ import annotations

import pytest
import torch

from rl8lite import Algorithm
from rl8lite.examples import CartPole, Pendulum

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CONFIG = {"num_envs": 256, "horizon": 16, "seed": 0, "device": "cuda", "num_sgd_iters": 3, "sgd_minibatch_size": 1024,
              "model_config": {"hiddens": [64, 64]}}


class UncapturableCartPole(CartPole):
    """CartPole whose step the collect may not capture: only the policy's sampling is."""

    capturable = False


def close(got: dict[str, float], want: dict[str, float]) -> None:
    for key, value in want.items():
        if not key.startswith(("profiling/", "memory/", "throughput/")):
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5, nan_ok=True), key


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_the_captured_update_equals_eager(env_cls: type) -> None:
    # unshuffled: both algorithms draw from one random stream
    eager = Algorithm(env_cls, cuda_graphs=False, shuffle_minibatches=False, **CONFIG)
    graphed = Algorithm(env_cls, cuda_graphs=True, shuffle_minibatches=False, **CONFIG)
    assert graphed.graphs_off is None and eager.graphs_off == "cuda_graphs=False"
    for _ in range(3):  # eager once, captured, replayed
        eager.collect()
        graphed.buffer.update_(eager.buffer)
        graphed.state = type(eager.state)(**vars(eager.state))
        got, want = graphed.step(), eager.step()
        if env_cls is Pendulum:  # SquashedNormal's entropy is a sampled estimate: other draws
            del got["losses/entropy"], want["losses/entropy"]
        close(got, want)
    for (name, got), want in zip(graphed.policy.state_dict().items(), eager.policy.state_dict().values()):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("env_cls", [CartPole, UncapturableCartPole])
def test_captured_collects_equal_eager(env_cls: type) -> None:
    def collects(graphs: bool) -> tuple[list[dict[str, float]], torch.Tensor]:
        algo = Algorithm(env_cls, cuda_graphs=graphs, **CONFIG)  # seeded: one after the other
        assert (algo.rollout.graphed is not None) == (graphs and env_cls is CartPole)
        stats = [algo.collect() for _ in range(3)]  # eager once, captured, replayed
        stats.append(algo.evaluate(env_config={"length": 1.0}))  # another config, captured too
        stats.append(algo.collect())
        return stats, algo.buffer["obs"].clone()

    (got, got_obs), (want, want_obs) = collects(True), collects(False)
    for a, b in zip(got, want):
        close(a, b)
    torch.testing.assert_close(got_obs, want_obs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("env_cls", [CartPole, UncapturableCartPole])
@pytest.mark.parametrize("graphs", [True, False])
def test_the_rollout_reads_nothing_back_to_the_host(env_cls: type, graphs: bool) -> None:
    algo = Algorithm(env_cls, cuda_graphs=graphs, **CONFIG)
    for _ in range(2):  # the first collect checks the env's outputs (reads once); the second captures
        algo.collect()
        algo.step()
    with torch.inference_mode():
        obs = algo.rollout.first_observation(reset=False, env_config=None)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            algo.rollout.run(obs, deterministic=False)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def test_a_non_finite_loss_stops_the_captured_update_with_parameters_intact() -> None:
    algo = Algorithm(CartPole, cuda_graphs=True, **{**CONFIG, "num_sgd_iters": 1, "shuffle_minibatches": False})
    for _ in range(2):  # the second update replays the captured step
        algo.collect()
        algo.step()
    algo.collect()
    algo.buffer["rewards"][0, 0] = float("nan")
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with pytest.raises(ValueError, match="non-finite loss"):
        algo.step()
    for a, b in zip(before, algo.policy.parameters()):
        assert torch.equal(a, b)
