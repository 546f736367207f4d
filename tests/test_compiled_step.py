"""The update's whole minibatch step compiled as one graph on a CPU: the eager update's
numbers within float tolerance, its failures, and where it is not used."""

from __future__ import annotations

import copy

import pytest
import torch

from rl8lite import Algorithm, RecurrentAlgorithm
from rl8lite.algorithms import algorithm as algorithm_module
from rl8lite.algorithms.compiled_step import adam_update
from rl8lite.algorithms.rollout import NonFiniteError
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import CartPole, Pendulum
from rl8lite.models import DefaultModel
from rl8lite.runtime.checkpoint_files import capture_rng, restore_rng
from tests.helpers import train


@pytest.mark.parametrize("optimizer_cls", [torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("fused", [True, False])
def test_adam_update_is_torch_adam(optimizer_cls: type, weight_decay: float, fused: bool) -> None:
    torch.manual_seed(0)
    param = torch.nn.Parameter(torch.randn(5, 3))
    optimizer = optimizer_cls([param], lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                              weight_decay=weight_decay, fused=fused)
    mine = param.detach().clone()
    exp_avg, exp_avg_sq, step = torch.zeros_like(mine), torch.zeros_like(mine), torch.tensor(0.0)
    for _ in range(5):
        grad = torch.randn(5, 3)
        param.grad = grad.clone()
        optimizer.step()
        mine, exp_avg, exp_avg_sq, step = adam_update(
            mine, grad, exp_avg, exp_avg_sq, step, lr=torch.tensor(0.01, dtype=torch.float64),
            beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=weight_decay,
            decoupled=optimizer_cls is torch.optim.AdamW)
    state = optimizer.state[param]
    torch.testing.assert_close(mine, param.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(exp_avg, state["exp_avg"], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(exp_avg_sq, state["exp_avg_sq"], rtol=1e-6, atol=1e-10)
    assert float(step) == float(state["step"]) == 5


def assert_same_training(got: Algorithm, want: Algorithm, got_history: list[dict[str, float]],
                         want_history: list[dict[str, float]]) -> None:
    for got_stats, want_stats in zip(got_history, want_history, strict=True):
        for key in want_stats:
            if not key.startswith(("profiling/", "throughput/")):
                assert got_stats[key] == pytest.approx(want_stats[key], rel=1e-4, abs=1e-6,
                                                       nan_ok=True), key
    for (name, a), b in zip(got.policy.state_dict().items(), want.policy.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)
    got_state, want_state = got.optimizer.state_dict(), want.optimizer.state_dict()
    assert got_state["param_groups"] == want_state["param_groups"]
    for index, want_tensors in want_state["state"].items():
        for key, value in want_tensors.items():
            torch.testing.assert_close(got_state["state"][index][key], value, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_auto_compiles_after_its_planned_steps_and_trains_as_eager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 256 samples in minibatches of 64, 2 passes: 8 optimizer steps per update; the second
    # update is compiled. AdamW with weight decay, a learning-rate schedule, normalised
    # observations, a Gaussian policy: every input the compiled step reads.
    config = {"num_envs": 16, "horizon": 16, "sgd_minibatch_size": 64, "num_sgd_iters": 2,
              "optimizer_cls": torch.optim.AdamW,
              "optimizer_config": {"lr": 1e-3, "weight_decay": 0.01},
              "lr_schedule": [(0, 1e-3), (1024, 1e-4)], "lr_schedule_kind": "interp",
              "normalize_observations": True, "entropy_coeff": 0.01}
    monkeypatch.setattr(algorithm_module, "AUTO_COMPILE_AFTER_STEPS", 8)
    eager = Algorithm(Pendulum, seed=0, compile=False, **config)
    eager_history = train(eager, 3)
    auto = Algorithm(Pendulum, seed=0, **config)
    assert auto.hparams.compile == "auto" and auto.whole_step_off is None
    auto_history = train(auto, 1)
    assert not auto.update.whole_step_compiled
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    # the squashed Gaussian's entropy is a one-sample estimate: eager's random numbers
    with torch._inductor.config.patch(fallback_random=True):
        auto_history += train(auto, 2)
    assert auto.update.whole_step_compiled and auto.update.step_fn.compiled is not None
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1  # one graph
    assert_same_training(auto, eager, auto_history, eager_history)
    assert not eager.update.whole_step_compiled
    # the count is the checkpoint's: a resumed run compiles from its first update, and takes
    # the same steps (built first: building an Algorithm seeds the global RNG)
    resumed = Algorithm(Pendulum, seed=0, **config)
    checkpoint, rng = copy.deepcopy(auto.state_dict()), capture_rng()
    with torch._inductor.config.patch(fallback_random=True):
        auto_history = train(auto, 1)
        resumed.load_state_dict(checkpoint)
        restore_rng(rng)
        resumed_history = train(resumed, 1)
    assert resumed.update.whole_step_compiled
    assert_same_training(resumed, auto, resumed_history, auto_history)


@pytest.mark.slow
def test_steps_of_every_size_and_changes_between_updates_are_taken_as_eager() -> None:
    # 160 samples: minibatches of 64, 64 and 32 (two graphs); Adam's betas and eps changed
    # between updates (the optimizer's options and state are read once an update)
    config = {"num_envs": 10, "horizon": 16, "sgd_minibatch_size": 64, "num_sgd_iters": 2,
              "optimizer_config": {"lr": 1e-3}}
    runs = []
    for compile in (False, True):  # one after the other: building an Algorithm seeds the RNG
        algo = Algorithm(CartPole, seed=0, compile=compile, **config)
        history = train(algo, 2)
        algo.optimizer.param_groups[0].update(betas=(0.5, 0.9), eps=1e-3)
        runs.append((algo, history + train(algo, 2)))
    (eager, eager_history), (compiled, compiled_history) = runs
    assert compiled.update.step_fn.compiled is not None
    assert_same_training(compiled, eager, compiled_history, eager_history)


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_compiled_steps_and_raises_after_the_pass() -> None:
    # 4 copies x 4 steps, unshuffled, minibatches of 8: the NaN reward of the last copy
    # poisons the second minibatch only; the first one's step stands.
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, seed=0, shuffle_minibatches=False,
                     normalize_advantages=False, optimizer_config={"lr": 1e-2},
                     sgd_minibatch_size=8, num_sgd_iters=2, compile=True)
    assert algo.update.whole_step_compiled
    algo.collect()
    algo.buffer["rewards"][3, 3] = float("nan")
    before = [p.detach().clone() for p in algo.policy.parameters()]
    with pytest.raises(NonFiniteError, match="non-finite loss"):
        algo.step()
    after = [p.detach().clone() for p in algo.policy.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert all(torch.isfinite(p).all() for p in after)
    steps = {float(state["step"]) for state in algo.optimizer.state.values()}
    assert steps == {1.0}  # the first minibatch's step; none from the NaN on
    assert not algo.update.failed.any()  # cleared by the raise: the next update starts clean


class GraphBreakingModel(DefaultModel):
    """A model the compiler cannot trace as one graph."""

    separable = True

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torch._dynamo.graph_break()
        return super().forward(obs)


def test_a_model_that_does_not_compile_whole_warns_and_trains_as_before() -> None:
    config = {"num_envs": 4, "horizon": 8, "sgd_minibatch_size": 16, "num_sgd_iters": 1,
              "model_cls": GraphBreakingModel, "model_config": {"num_features": 2}}
    eager = Algorithm(CartPole, seed=0, compile=False, **config)
    eager_history = train(eager, 1)
    compiled = Algorithm(CartPole, seed=0, compile=True, **config)
    with pytest.warns(RuntimeWarning, match="did not compile as one graph"):
        history = train(compiled, 1)
    assert compiled.update.step_fn.compiled is None
    assert_same_training(compiled, eager, history, eager_history)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: RecurrentAlgorithm(CartPole, num_envs=2, horizon=4, seq_len=2, compile=True),
         "a recurrent policy"),
        (lambda: Algorithm(CartPole, num_envs=2, horizon=4, compile=True,
                           optimizer_cls=torch.optim.SGD), "an optimizer other than Adam/AdamW"),
        (lambda: Algorithm(CartPole, num_envs=2, horizon=4, compile=True, enable_amp=True),
         "mixed precision"),
        (lambda: Algorithm(CartPole, num_envs=2, horizon=4, compile=True,
                           optimizer_config={"amsgrad": True}),
         "amsgrad, maximize or a differentiable optimizer"),
    ],
)
def test_where_the_whole_step_is_not_compiled_the_loss_is(make, reason: str) -> None:
    algo = make()
    assert algo.whole_step_off == reason
    assert not algo.update.whole_step_compiled
    assert algo.update.chunk_losses != algo.update.chunk_losses_eager


def test_compile_takes_a_bool_or_auto() -> None:
    from rl8lite.algorithms.config import ConfigError

    with pytest.raises(ConfigError, match="compile must be True, False or 'auto', received 1"):
        Algorithm(CartPole, num_envs=2, horizon=4, compile=1)


@pytest.mark.slow
def test_a_frozen_parameter_is_neither_differentiated_nor_stepped() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4, seed=0, sgd_minibatch_size=8,
                     compile=True)
    frozen = algo.policy.model.critic[0].weight
    frozen.requires_grad_(False)  # after the optimizer was built, as a user would
    before = frozen.detach().clone()
    algo.collect()
    algo.step()
    assert algo.update.step_fn.compiled is not None
    assert torch.equal(frozen, before) and not algo.optimizer.state[frozen]
    steps = algo.hparams.num_sgd_iters * algo.hparams.num_minibatches
    assert all(float(algo.optimizer.state[p]["step"]) == steps for p in algo.policy.parameters()
               if p.requires_grad)
