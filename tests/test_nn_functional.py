"""rl8lite.nn.functional: masks, masked pooling and sampling against explicit loops and hand-computed
numbers; rl8's GAE and PPO loss adapters against hand-computed numbers."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from tensordict import TensorDict

import rl8lite.nn.functional
import rl8lite.nn.ppo
from rl8lite.nn import (
    binary_mask_to_float_mask,
    float_mask_to_binary_mask,
    generalized_advantage_estimate,
    mask_from_lengths,
    masked_avg,
    masked_categorical_sample,
    masked_log_softmax,
    masked_max,
    ppo_losses,
    skip_connection,
)

INF = float("inf")


def random_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 2, generator=generator)
    mask = torch.rand(3, 5, generator=generator) < 0.6
    mask[:, 0] = True  # every row has a valid value
    return x, mask


def test_mask_converters_map_valid_to_zero_and_invalid_to_minus_inf() -> None:
    assert binary_mask_to_float_mask(torch.tensor([[1, 0], [0, 1]])).tolist() == [[0.0, -INF], [-INF, 0.0]]
    assert binary_mask_to_float_mask(torch.tensor([True, False])).tolist() == [0.0, -INF]
    assert float_mask_to_binary_mask(torch.tensor([0.0, -INF, 0.0])).tolist() == [True, False, True]
    mask = torch.tensor([[True, False, True]])
    assert torch.equal(float_mask_to_binary_mask(binary_mask_to_float_mask(mask)), mask)


def test_mask_from_lengths_marks_the_first_steps_of_each_sequence() -> None:
    lengths = torch.tensor([0, 2, 4])
    mask = mask_from_lengths(torch.zeros(3, 4, 7), lengths)
    assert mask.tolist() == [[t < int(n) for t in range(4)] for n in lengths]


@pytest.mark.parametrize("dim", [0, 1])
def test_masked_avg_matches_a_loop_over_the_valid_values(dim: int) -> None:
    x, mask = random_case(0)
    mask[1] = True  # dim 0: every column has a valid value
    x[~mask] = float("nan")  # padding never reaches the result
    out = masked_avg(x, mask=mask, dim=dim)
    for b in range(3 if dim == 1 else 5):
        for f in range(2):
            values = [x[b, t, f] if dim == 1 else x[t, b, f] for t in range(x.shape[dim])
                      if (mask[b, t] if dim == 1 else mask[t, b])]
            assert float(out[b, f]) == pytest.approx(float(sum(values)) / len(values), rel=1e-6)
    assert masked_avg(x, mask=mask, dim=dim, keepdim=True).shape[dim] == 1


def test_masked_avg_without_a_mask_is_the_mean_and_nothing_valid_is_nan() -> None:
    x = torch.tensor([[1.0, 2.0, 6.0]])
    assert masked_avg(x).tolist() == [3.0]
    assert masked_avg(x, mask=torch.zeros(1, 3, dtype=torch.bool)).isnan().all()


def test_masked_max_matches_a_loop_over_the_valid_values() -> None:
    x, mask = random_case(1)
    values, index = masked_max(x, mask=mask, dim=1)
    assert values.shape == index.shape == (3, 1, 2)
    for b in range(3):
        for f in range(2):
            valid = [t for t in range(5) if mask[b, t]]
            best = max(valid, key=lambda t: (x[b, t, f], -t))
            assert index[b, 0, f] == best and values[b, 0, f] == x[b, best, f]


def test_masked_max_of_integers_and_of_nothing_valid() -> None:
    x = torch.tensor([[3, 9, 4]])
    assert masked_max(x, mask=torch.tensor([[True, False, True]])) == (torch.tensor([[4]]), torch.tensor([[2]]))
    values, index = masked_max(torch.ones(1, 2), mask=torch.zeros(1, 2, dtype=torch.bool))
    assert values.item() == torch.finfo(torch.float32).min and index.item() == 0


def test_masked_log_softmax_is_the_log_softmax_of_the_valid_values() -> None:
    x, mask = random_case(2)
    logits, valid = x[..., 0], mask
    out = masked_log_softmax(logits, mask=valid)
    for b in range(3):
        norm = math.log(sum(math.exp(logits[b, t]) for t in range(5) if valid[b, t]))
        for t in range(5):
            if valid[b, t]:
                assert float(out[b, t]) == pytest.approx(float(logits[b, t]) - norm, abs=1e-6)
            else:
                assert out[b, t].exp() == 0.0


def test_masked_categorical_sample_draws_valid_categories_at_their_softmax_frequencies() -> None:
    torch.manual_seed(0)
    n = 20_000
    x = torch.tensor([[0.0, math.log(2.0), math.log(3.0), 5.0]]).expand(n, -1)
    mask = torch.tensor([[True, True, True, False]]).expand(n, -1)
    logits, samples = masked_categorical_sample(x, mask=mask, dim=1)
    assert samples.shape == logits.shape == (n, 1)
    frequencies = torch.bincount(samples.flatten(), minlength=4).float() / n
    assert frequencies[3] == 0.0
    assert frequencies[:3].tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6], abs=0.015)
    assert torch.equal(logits.flatten(), x[torch.arange(n), samples.flatten()])


def test_skip_connection_kinds() -> None:
    x, y = torch.tensor([[1.0, 2.0]]), torch.tensor([[10.0, 20.0]])
    assert skip_connection(x, y, kind="residual").tolist() == [[11.0, 22.0]]
    assert skip_connection(x, y).tolist() == [[1.0, 2.0, 10.0, 20.0]]
    assert skip_connection(x, y, kind="cat", dim=0).tolist() == [[1.0, 2.0], [10.0, 20.0]]
    assert skip_connection(x, y, kind=None) is y
    with pytest.raises(ValueError, match=r"no skip connection kind 'sum'"):
        skip_connection(x, y, kind="sum")


def rollout(rewards: list[float], values: list[float]) -> TensorDict:
    return TensorDict({"rewards": torch.tensor([rewards]).unsqueeze(-1), "values": torch.tensor([values]).unsqueeze(-1)},
                      batch_size=[1, len(values)])


def test_rl8_gae_by_hand() -> None:
    # r = [1, 2] / reward_scale 2 = [0.5, 1]; V = [0.5, 1, 2]; gamma 0.9, lambda 0.8:
    # delta_1 = 1 + 0.9 * 2 - 1 = 1.8 = A_1;  delta_0 = 0.5 + 0.9 * 1 - 0.5 = 0.9;  A_0 = 0.9 + 0.72 * 1.8 = 2.196
    batch = rollout([1.0, 2.0, 100.0], [0.5, 1.0, 2.0])
    out = generalized_advantage_estimate(batch, gamma=0.9, gae_lambda=0.8, reward_scale=2.0, normalize_advantages=False)
    assert out["advantages"].flatten().tolist() == pytest.approx([2.196, 1.8, 0.0], rel=1e-6)
    assert out["returns"].flatten().tolist() == pytest.approx([2.696, 2.8, 2.0], rel=1e-6)
    assert "advantages" not in batch.keys() and batch["rewards"].flatten().tolist() == [1.0, 2.0, 100.0]


def test_rl8_gae_normalizes_all_but_the_last_step_after_taking_returns() -> None:
    batch = rollout([1.0, 2.0, 100.0], [0.5, 1.0, 2.0])
    out = generalized_advantage_estimate(batch, gamma=0.9, gae_lambda=0.8, reward_scale=2.0, inplace=True)
    assert out is batch
    # [2.196, 1.8]: mean 1.998, unbiased std 0.396 / sqrt(2)
    assert out["advantages"].flatten().tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), 0.0], rel=1e-5)
    assert out["returns"].flatten().tolist() == pytest.approx([2.696, 2.8, 2.0], rel=1e-6)
    assert batch["rewards"].flatten().tolist() == [1.0, 2.0, 100.0]


def test_rl8_gae_treats_each_feature_as_its_own_sequence() -> None:
    batch = TensorDict({"rewards": torch.tensor([[[1.0, 0.0], [1.0, 2.0]]]), "values": torch.zeros(1, 2, 2)},
                       batch_size=[1, 2])
    out = generalized_advantage_estimate(batch, gamma=1.0, gae_lambda=1.0, normalize_advantages=False,
                                         return_returns=False)
    assert out["advantages"].tolist() == [[[1.0, 0.0], [0.0, 0.0]]]
    assert "returns" not in out.keys()


class FixedDistribution:
    """A distribution whose log-probabilities and entropies are given."""

    def __init__(self, logp: list[float], entropy: list[float] | None = None) -> None:
        self._logp, self._entropy = torch.tensor(logp).unsqueeze(-1), entropy

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self._logp

    def entropy(self) -> torch.Tensor:
        assert self._entropy is not None, "entropy() called with entropy_coeff=0"
        return torch.tensor(self._entropy).unsqueeze(-1)


def ppo_case() -> tuple[TensorDict, TensorDict]:
    buffer = TensorDict({
        "actions": torch.zeros(3, 1), "logp": torch.zeros(3, 1),
        "advantages": torch.tensor([[1.0], [-1.0], [-1.0]]), "returns": torch.tensor([[0.5], [0.0], [0.0]]),
    }, batch_size=[3])
    return buffer, TensorDict({"values": torch.tensor([[0.0], [2.0], [5.0]])}, batch_size=[3])


def test_rl8_ppo_losses_by_hand() -> None:
    # ratios [1.5, 5, 1.1], A [1, -1, -1], eps 0.2: min(rA, clip(r)A) = [1.2, -5, -1.1];
    # dual clip 3 lifts -5 to -3: policy = (1.2 - 3 - 1.1) / 3.
    # smooth-L1 of V - R = [-0.5, 2, 5]: [0.125, 1.5, 4.5], capped at 2: mean 3.625 / 3.
    buffer, sample = ppo_case()
    dist = FixedDistribution([math.log(1.5), math.log(5.0), math.log(1.1)], [0.3, 0.6, 0.9])
    out = ppo_losses(buffer, sample, dist, clip_param=0.2, dual_clip_param=3.0, entropy_coeff=0.1,
                     vf_clip_param=2.0, vf_coeff=0.5)
    assert sorted(out.keys()) == ["entropy", "policy", "total", "vf"] and out.batch_size == ()
    policy, vf, entropy = -2.9 / 3, 3.625 / 3, 0.6
    assert out["policy"].item() == pytest.approx(policy, rel=1e-6)
    assert out["vf"].item() == pytest.approx(vf, rel=1e-6)
    assert out["entropy"].item() == pytest.approx(entropy, rel=1e-6)
    assert out["total"].item() == pytest.approx(0.5 * vf - policy - 0.1 * entropy, rel=1e-6)


@pytest.mark.parametrize("dual_clip_param", [None, 0.0])
def test_rl8_ppo_losses_without_dual_clip_or_entropy(dual_clip_param: float | None) -> None:
    buffer, sample = ppo_case()
    dist = FixedDistribution([math.log(1.5), math.log(5.0), math.log(1.1)])
    out = ppo_losses(buffer, sample, dist, dual_clip_param=dual_clip_param, vf_clip_param=2.0)
    assert out["policy"].item() == pytest.approx(-4.9 / 3, rel=1e-6)
    assert out["entropy"].item() == 0.0
    assert out["total"].item() == pytest.approx(3.625 / 3 + 4.9 / 3, rel=1e-6)


@pytest.mark.parametrize("module", [rl8lite.nn.functional, rl8lite.nn.ppo])
def test_docstring_examples_run(module: object) -> None:
    assert doctest.testmod(module).failed == 0
