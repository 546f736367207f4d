"""Algorithm semantics: env resets, buffer layout, episodes, seeding, validation, learning."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, AlgorithmConfig, RecurrentAlgorithm, RecurrentAlgorithmConfig
from rl8lite.algorithms.buffer import flat_rows
from rl8lite.algorithms.buffer import index_dtype as row_index_dtype
from rl8lite.data import DataKeys
from rl8lite.env import ContinuousDummyEnv, DiscreteDummyEnv
from rl8lite.examples import CartPole, Pendulum
from rl8lite.models import DefaultModel
from rl8lite.specs import Bounded, Unbounded
from rl8lite.specs import Categorical as CategoricalSpec

from .helpers import EpisodicCounter, MaskedChoice


def test_config_build_and_buffer_layout() -> None:
    algo = AlgorithmConfig(num_envs=6, horizon=5, seed=0).build(DiscreteDummyEnv)
    assert algo.buffer.batch_size == torch.Size([6, 6])
    assert algo.buffer[DataKeys.OBS].shape == torch.Size([6, 6, 1])
    stats = algo.collect()
    assert stats["env/steps"] == 30 and stats["env/resets"] == 6
    # index 0 holds the first observation; the value at T bootstraps
    obs, actions = algo.buffer[DataKeys.OBS], algo.buffer[DataKeys.ACTIONS]
    torch.testing.assert_close(obs[:, 1], obs[:, 0] + 2 * actions[:, 0] - 1)
    with torch.no_grad():
        torch.testing.assert_close(algo.buffer[DataKeys.VALUES][:, 5], algo.policy.values(obs[:, 5]))


@pytest.mark.parametrize("k, resets", [(1, [6, 6, 6]), (2, [6, 0, 6]), (-1, [6, 0, 0])])
def test_horizons_per_env_reset(k: int, resets: list[int]) -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=6, horizon=3, horizons_per_env_reset=k, seed=0)
    seen = []
    for _ in range(3):
        last_obs = algo.buffer[DataKeys.OBS][:, -1].clone()
        stats = algo.collect()
        seen.append(int(stats["env/resets"]))
        if stats["env/resets"] == 0:
            torch.testing.assert_close(algo.buffer[DataKeys.OBS][:, 0], last_obs)
        algo.step()
    assert seen == resets


def test_an_env_that_ends_episodes_is_reset_only_at_the_first_collect_by_default() -> None:
    # it resets its own copies; periodic full resets would line every copy's episodes up
    for env_cls in (CartPole, EpisodicCounter):  # declares max_episode_steps, or only reports ends
        algo = Algorithm(env_cls, num_envs=2, horizon=4, seed=0)
        resets = [algo.collect()["env/resets"] for _ in range(3)]
        assert resets == [2, 0, 0] and algo.horizons_per_env_reset == -1
    # rl8's infinite-horizon envs keep rl8's default: a reset every collect
    algo = Algorithm(DiscreteDummyEnv, num_envs=2, horizon=4, seed=0)
    assert [algo.collect()["env/resets"] for _ in range(2)] == [2, 2] and algo.horizons_per_env_reset == 1


def test_episode_statistics_and_bootstrap_flags() -> None:
    algo = Algorithm(EpisodicCounter, num_envs=3, horizon=12, horizons_per_env_reset=-1, seed=0)
    stats = algo.collect()
    # copies last 3, 4, 5 steps: 4 + 3 + 2 episodes end in 12 steps
    assert stats["episodes/count"] == 9
    assert stats["episodes/return_mean"] == pytest.approx((4 * 3 + 3 * 4 + 2 * 5) / 9)
    assert stats["episodes/length_mean"] == pytest.approx((4 * 3 + 3 * 4 + 2 * 5) / 9)
    assert stats["episodes/return_min"] == 3 and stats["episodes/return_max"] == 5
    terminated = algo.buffer[DataKeys.TERMINATED][0, :12, 0]
    assert terminated.nonzero().flatten().tolist() == [2, 5, 8, 11]
    algo.step()
    # the next collect continues the copies' episodes: copy 2 had run 2 of its 5 steps
    stats = algo.collect()
    assert stats["episodes/count"] == 4 + 3 + 2
    assert algo.statistics.episode_length.tolist() == [0, 0, 4]


def test_seed_gives_identical_stats() -> None:
    def run() -> list[dict[str, float]]:
        algo = Algorithm(CartPole, num_envs=16, horizon=8, seed=123, sgd_minibatch_size=32)
        out = []
        for _ in range(3):
            stats = algo.collect()
            stats.update(algo.step())
            out.append({k: v for k, v in stats.items() if not k.startswith("profiling")})
        return out

    first, second = run(), run()
    assert repr(first) == repr(second)  # repr: NaN (no finished episode yet) equals itself
    assert first[0]['episodes/count'] == 0 and first[-1]['losses/total'] == first[-1]['losses/total']


def test_deterministic_collect_uses_the_mode() -> None:
    algo = Algorithm(ContinuousDummyEnv, num_envs=4, horizon=3, seed=0)
    algo.collect(deterministic=True)
    obs = algo.buffer[DataKeys.OBS][:, 0]
    with torch.no_grad():
        features, _ = algo.policy.model(obs)
    torch.testing.assert_close(algo.buffer[DataKeys.ACTIONS][:, 0], features[:, :1])


def test_step_before_collect_is_an_error() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2)
    with pytest.raises(RuntimeError, match=r"call collect\(\) before step\(\)"):
        algo.step()


def test_minibatches_chunks_and_accumulation_run() -> None:
    for overrides in (
        {"sgd_minibatch_size": 10, "update_chunk_size": 3},
        {"sgd_minibatch_size": 8, "accumulate_grads": True},
        {"target_kl_div": 1e-9, "num_sgd_iters": 5},
        {"enable_amp": True},
        {"dual_clip_param": 3.0, "vf_clip_param": 0.5, "entropy_coeff": 0.01},
        {"vf_loss": "smooth_l1", "vf_clip_param": 5.0},
    ):
        algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=8, seed=0, **overrides)
        algo.collect()
        stats = algo.step()
        assert not any(math.isnan(v) for v in stats.values()), overrides


@pytest.mark.parametrize("enable_amp", [False, True])
def test_amp_on_cpu_runs_the_update_in_bf16_and_the_collect_in_fp32(enable_amp: bool) -> None:
    algo = Algorithm(CartPole, num_envs=4, horizon=8, seed=0, device="cpu", enable_amp=enable_amp)
    seen: list[tuple[bool, torch.dtype]] = []
    algo.policy.model.actor.register_forward_hook(
        lambda module, args, out: seen.append((torch.is_grad_enabled(), out.dtype))
    )
    algo.collect()
    collect_dtypes = {dtype for _, dtype in seen}
    seen.clear()
    stats = algo.step()
    update_dtypes = {dtype for grad, dtype in seen if grad}
    assert collect_dtypes == {torch.float32}
    assert update_dtypes == {torch.bfloat16 if enable_amp else torch.float32}
    # with AMP the old log-probabilities are recomputed once, without autograd, in bf16
    assert {dtype for grad, dtype in seen if not grad} == ({torch.bfloat16} if enable_amp else set())
    assert all(p.dtype == torch.float32 for p in algo.policy.parameters())
    assert stats["losses/total"] == stats["losses/total"]  # finite, fp32 loss


@pytest.mark.parametrize("recurrent", [False, True])
def test_with_amp_a_narrow_gaussian_policy_starts_its_update_at_ratio_one(recurrent: bool) -> None:
    # A converged Pendulum policy: sigma ~ 0.018, so a bf16 mean is off by several sigmas.
    algo_cls, extra = (RecurrentAlgorithm, {"seq_len": 4}) if recurrent else (Algorithm, {})
    algo = algo_cls(Pendulum, num_envs=16, horizon=8, seed=0, enable_amp=True, num_sgd_iters=1, **extra)
    with torch.no_grad():
        algo.policy.model.actor[-1].bias.fill_(0.7)
        algo.policy.model.log_std.fill_(-4.0)
    algo.collect()
    stats = algo.step()  # one pass, one optimizer step: its monitors see the ratio before any change
    assert stats["monitors/clip_fraction"] == 0.0  # 0.02 with the collect's fp32 log-probabilities
    assert abs(stats["monitors/kl_div"]) < 1e-6  # 3e-3 with them
    algo.collect()
    random_state = torch.get_rng_state()
    algo.update.recompute_old_logp(algo.recurrence.update_batch(algo.buffer, None))
    assert torch.equal(random_state, torch.get_rng_state())  # the random stream is untouched


def test_target_kl_stops_passes_early() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=8, horizon=8, seed=0, target_kl_div=1e-12,
                     num_sgd_iters=6, sgd_minibatch_size=16, optimizer_config={"lr": 1e-2})
    algo.collect()
    assert algo.step()["monitors/sgd_iters"] == 1


def test_auto_chunk_sizes_resolve_per_device() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=2, device="cpu")
    assert (algo.hparams.update_chunk_size, algo.hparams.collect_chunk_size) == ("auto", "auto")
    # the default 2x64 actor + critic: 259 activation floats a row (tests/test_chunks.py)
    assert (algo.update_chunk_samples, algo.recurrence.chunk_rows) == (8192, 8192)
    explicit = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=2, device="cpu",
                         update_chunk_size=None, collect_chunk_size=3)
    assert (explicit.update_chunk_samples, explicit.recurrence.chunk_rows) == (None, 3)
    if torch.cuda.is_available():
        gpu = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=2, device="cuda")
        assert (gpu.update_chunk_samples, gpu.recurrence.chunk_rows) == (None, None)


def test_chunking_gives_the_same_update() -> None:
    def params_after(chunk: int | None) -> list[torch.Tensor]:
        algo = Algorithm(CartPole, num_envs=8, horizon=8, seed=5, update_chunk_size=chunk,
                         shuffle_minibatches=False)
        algo.collect()
        algo.step()
        return [p.detach().clone() for p in algo.policy.parameters()]

    for a, b in zip(params_after(None), params_after(7)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("recurrent", [False, True])
def test_collecting_in_chunks_of_copies_gives_the_same_rollout(recurrent: bool) -> None:
    def rollout(chunk: int | None) -> TensorDict:
        cls, extra = (RecurrentAlgorithm, {"seq_len": 2}) if recurrent else (Algorithm, {})
        algo = cls(CartPole, num_envs=8, horizon=6, seed=3, env_config={"max_episode_steps": 4},
                   collect_chunk_size=chunk, **extra)
        algo.collect(deterministic=True)
        return algo.buffer.clone()

    whole, chunked = rollout(None), rollout(3)
    assert whole[DataKeys.TRUNCATED].any()  # final values are computed in chunks too
    for key in whole.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(chunked[key], whole[key], rtol=1e-6, atol=1e-6, msg=str(key))


class CoupledDefaultModel(DefaultModel):
    """Overrides forward (as a model sharing layers would): not separable."""

    def forward(self, obs):  # type: ignore[no-untyped-def, override]
        return super().forward(obs)


@pytest.mark.parametrize("env_cls", [CartPole, MaskedChoice])
def test_values_from_one_pass_after_the_rollout_equal_per_step_values(env_cls: type) -> None:
    def rollout(model_cls: type) -> TensorDict:
        algo_cls = type("Algo", (Algorithm,), {"default_model_cls": model_cls})
        algo = algo_cls(env_cls, num_envs=6, horizon=8, seed=1,
                        env_config={"max_episode_steps": 5} if env_cls is CartPole else None,
                        collect_chunk_size=4)
        assert algo.policy.separable is (model_cls is DefaultModel)
        algo.collect()
        algo.collect()  # the second collect starts from the last observation
        return algo.buffer.clone()

    after, per_step = rollout(DefaultModel), rollout(CoupledDefaultModel)
    if env_cls is CartPole:
        assert per_step[DataKeys.TRUNCATED].any()  # final values read the batched values
    for key in per_step.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(after[key], per_step[key], rtol=1e-6, atol=1e-6, msg=str(key))


class ScalarObservations(DiscreteDummyEnv):
    """The dummy env with scalar observations (spec shape ``[]``) of a given dtype."""

    obs_dtype = torch.float32

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.observation_spec = Unbounded(shape=(), dtype=self.obs_dtype, device=self.device)

    def reset(self, *, config=None) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return super().reset(config=config)[:, 0].to(self.obs_dtype)

    def step(self, action: torch.Tensor) -> TensorDict:
        out = super().step(action)
        out["obs"] = out["obs"][:, 0].to(self.obs_dtype)
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_default_model_takes_scalar_observations(dtype: torch.dtype) -> None:
    env_cls = type("Scalar", (ScalarObservations,), {"obs_dtype": dtype})
    algo = Algorithm(env_cls, num_envs=4, horizon=3, seed=0)
    assert algo.buffer[DataKeys.OBS].shape == torch.Size([4, 4])
    algo.collect()
    assert torch.isfinite(torch.tensor(list(algo.step().values()))).all()
    with torch.no_grad():
        values = algo.policy.values(algo.buffer[DataKeys.OBS][:, 0])
    assert values.shape == torch.Size([4, 1])


def test_separable_models_are_declared_and_hooks_turn_the_batched_values_off() -> None:
    class Declared(DefaultModel):
        separable = True

        def forward(self, obs):  # type: ignore[no-untyped-def, override]
            return super().forward(obs)

    assert DefaultModel.separable and not CoupledDefaultModel.separable and Declared.separable
    algo = Algorithm(CartPole, num_envs=4, horizon=5, seed=0)
    assert algo.policy.separable
    seen = []
    handle = algo.policy.model.register_forward_pre_hook(lambda module, args: seen.append(1))
    assert not algo.policy.separable  # the hook must see every forward, the collect's too
    algo.collect()
    assert len(seen) == 5 + 1  # one forward per step and the bootstrap
    handle.remove()
    assert algo.policy.separable


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("recurrent", [False, True])
def test_update_chunks_read_the_samples_of_the_flattened_buffer(recurrent: bool, index_dtype: torch.dtype) -> None:
    n, horizon = 5, 6
    if recurrent:
        algo = RecurrentAlgorithm(CartPole, num_envs=n, horizon=horizon, seq_len=3, seed=0)
    else:
        algo = Algorithm(CartPole, num_envs=n, horizon=horizon, seed=0)
    algo.collect()
    steps = algo.seq_len
    units = torch.randperm(n * horizon // steps, dtype=index_dtype)
    assert row_index_dtype(n * (horizon + 1)) is torch.int32  # the update's unit indices
    for key in (DataKeys.OBS, DataKeys.ACTIONS, DataKeys.VALUES):
        entry = algo.buffer[key]
        expected = entry[:, :horizon].reshape(n * horizon // steps, steps, *entry.shape[2:])[units]
        gathered = flat_rows(entry)[algo.recurrence.unit_rows(units)]
        assert torch.equal(gathered.reshape(expected.shape), expected), key


@pytest.mark.slow
def test_discrete_dummy_env_learns() -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=64, horizon=32, seed=0, sgd_minibatch_size=512,
                     optimizer_config={"lr": 1e-3})
    first = algo.collect()["returns/mean"]
    algo.step()
    for _ in range(39):
        stats = algo.collect()
        algo.step()
    # random play scores about -1570; moving toward the origin every step about -1050
    assert first < -1400
    assert stats["returns/mean"] > -1150


@pytest.mark.slow
def test_continuous_dummy_env_learns() -> None:
    algo = Algorithm(ContinuousDummyEnv, num_envs=64, horizon=32, seed=0, sgd_minibatch_size=512,
                     optimizer_config={"lr": 1e-3})
    first = algo.collect()["returns/mean"]
    algo.step()
    for _ in range(39):
        stats = algo.collect()
        algo.step()
    assert first < -1400
    assert stats["returns/mean"] > -600


def test_custom_model_class_config_instance_and_distribution() -> None:
    from rl8lite.distributions import Normal
    from rl8lite.examples import Pendulum

    from .helpers import TinyModel

    algo = Algorithm(Pendulum, num_envs=4, horizon=4, seed=0, model_cls=TinyModel,
                     model_config={"width": 5}, distribution_cls=Normal)
    assert isinstance(algo.policy.model, TinyModel) and algo.policy.model.body.out_features == 5
    assert algo.policy.distribution_cls is Normal  # instead of the default SquashedNormal
    algo.collect()
    assert "losses/total" in algo.step()
    assert algo.params["model_cls"] == "tests.helpers.TinyModel"
    instance = TinyModel(algo.env.observation_spec, algo.env.action_spec, width=3)
    algo = Algorithm(Pendulum, num_envs=4, horizon=4, model=instance, distribution_cls=Normal)
    assert algo.policy.model is instance
    algo.collect()
    algo.step()


def test_a_one_chunk_pass_draws_no_shuffle_and_its_order_cannot_change_the_step() -> None:
    # 8 copies x 8 steps = 64 samples, one minibatch, one chunk: one optimizer step per pass.
    def run(shuffle: bool, permute_copies: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
        algo = Algorithm(CartPole, num_envs=8, horizon=8, seed=2, num_sgd_iters=3,
                         shuffle_minibatches=shuffle)
        algo.collect()
        if permute_copies:  # the same samples in another order
            algo.buffer.update(algo.buffer[torch.randperm(8, generator=torch.Generator().manual_seed(1))])
        algo.step()
        return [p.detach().clone() for p in algo.policy.parameters()], torch.rand(3)

    (shuffled, rng_shuffled), (ordered, rng_ordered) = run(True, False), run(False, False)
    assert torch.equal(rng_shuffled, rng_ordered)  # no permutation drawn
    permuted, _ = run(True, True)
    moved = False
    for a, b, c in zip(ordered, permuted, shuffled, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        assert torch.equal(c, a)
        moved |= not torch.equal(a, b)
    assert moved  # the permuted buffer did sum in another order


def _params_and_next_draws(**overrides: Any) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Policy parameters after one collect + step on 8 copies x 8 steps, and the global
    generator's next draws (they differ when the step drew a permutation)."""
    algo = Algorithm(CartPole, num_envs=8, horizon=8, seed=2, **overrides)
    algo.collect()
    algo.step()
    return [p.detach().clone() for p in algo.policy.parameters()], torch.rand(3)


@pytest.mark.parametrize(
    "pass_layout",
    [
        {"update_chunk_size": 24},  # one minibatch of 64 samples in chunks of 24
        {"sgd_minibatch_size": 16, "accumulate_grads": True},  # 4 minibatches, one step
    ],
    ids=["several-chunks", "accumulated-minibatches"],
)
def test_a_pass_of_one_optimizer_step_in_several_chunks_draws_no_shuffle(pass_layout: dict[str, Any]) -> None:
    (shuffled, rng_shuffled) = _params_and_next_draws(shuffle_minibatches=True, **pass_layout)
    (ordered, rng_ordered) = _params_and_next_draws(shuffle_minibatches=False, **pass_layout)
    assert torch.equal(rng_shuffled, rng_ordered)
    for a, b in zip(shuffled, ordered, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("recurrent", [False, True], ids=["feedforward", "recurrent"])
@pytest.mark.parametrize("env_cls", [ContinuousDummyEnv, DiscreteDummyEnv])
@pytest.mark.parametrize("passes", [1, 4])
def test_accumulated_minibatches_report_the_losses_of_one_whole_buffer_step(
    recurrent: bool, env_cls: type, passes: int
) -> None:
    # rl8's comparison (64 copies x 32 steps; 32 minibatches of 64 accumulated into one
    # step per pass). With one pass the policy loss is ~1e-8 (advantages normalised to mean
    # 0, ratio 1): reported sums in float32 differed by 20-40% there.
    config_cls = RecurrentAlgorithmConfig if recurrent else AlgorithmConfig
    stats = []
    for layout in ({}, {"accumulate_grads": True, "sgd_minibatch_size": 64}):
        torch.manual_seed(42)
        algo = config_cls(num_envs=64, horizon=32, entropy_coeff=1e-2, num_sgd_iters=passes, **layout).build(env_cls)
        algo.collect()
        stats.append(algo.step())
    whole, accumulated = stats
    if passes == 1:
        assert abs(whole["losses/policy"]) < 1e-6
    for key in ("losses/entropy", "losses/policy", "losses/vf", "losses/total", "monitors/kl_div"):
        assert math.isclose(whole[key], accumulated[key], rel_tol=1e-5), key


def test_passes_of_several_optimizer_steps_still_shuffle() -> None:
    (shuffled, rng_shuffled) = _params_and_next_draws(shuffle_minibatches=True, sgd_minibatch_size=16)
    (ordered, rng_ordered) = _params_and_next_draws(shuffle_minibatches=False, sgd_minibatch_size=16)
    assert not torch.equal(rng_shuffled, rng_ordered)
    assert any(not torch.allclose(a, b) for a, b in zip(shuffled, ordered, strict=True))


def with_action_spec(base: type, make_spec) -> type:  # type: ignore[no-untyped-def]
    """``base`` with the action spec ``make_spec(device)``; its step checks the actions' dtype."""

    class Env(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            self.action_spec = make_spec(self.device)

        def step(self, action: torch.Tensor) -> TensorDict:
            assert action.dtype == self.action_spec.dtype, action.dtype
            return super().step(action.float() if action.is_floating_point() else action)

    return Env


@pytest.mark.parametrize(
    "base, make_spec",
    [
        (ContinuousDummyEnv, lambda d: Unbounded(1, dtype=torch.float64, device=d)),
        (ContinuousDummyEnv, lambda d: Bounded(-1.0, 1.0, shape=[1], dtype=torch.float64, device=d)),
        (DiscreteDummyEnv, lambda d: CategoricalSpec(2, shape=[1], dtype=torch.int32, device=d)),
    ],
)
def test_actions_come_in_the_action_specs_dtype(base: type, make_spec) -> None:  # type: ignore[no-untyped-def]
    algo = Algorithm(with_action_spec(base, make_spec), num_envs=4, horizon=4, seed=0)
    dtype = algo.env.action_spec.dtype
    algo.collect()
    assert algo.buffer[DataKeys.ACTIONS].dtype == dtype
    stats = algo.step()
    # the log-probabilities recomputed from the stored actions equal the sampled ones
    assert stats["monitors/kl_div"] < 1e-2 and torch.isfinite(torch.tensor(stats["losses/total"]))
    algo.collect(deterministic=True)
    with torch.no_grad():
        actions, logp = algo.policy.sample_actions(algo.buffer[DataKeys.OBS][:, 0])
    assert actions.dtype == dtype and logp.dtype == torch.float32


@pytest.mark.parametrize("low, high", [([-1.0, -math.inf], [1.0, math.inf]), ([0.5], [0.5])])
def test_squashed_normal_refuses_bounds_it_cannot_squash_into(low, high) -> None:  # type: ignore[no-untyped-def]
    env_cls = with_action_spec(ContinuousDummyEnv, lambda d: Bounded(low, high, device=d))
    with pytest.raises(ValueError, match=r"SquashedNormal needs finite bounds with low < high .*Unbounded"):
        Algorithm(env_cls, num_envs=4, horizon=4)


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_the_env_steps_outside_inference_mode_after_a_collect(env_cls: type) -> None:
    # The collect resets the env under inference mode; CartPole updates its state in place,
    # which inference tensors refuse outside that mode.
    algo = Algorithm(env_cls, num_envs=4, horizon=4, seed=0)
    algo.collect()
    with torch.no_grad():
        actions, _ = algo.policy.sample_actions(algo.buffer[DataKeys.OBS][:, -1])
    out = algo.env.step(actions)
    assert out[DataKeys.OBS].shape[0] == 4
