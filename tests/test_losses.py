"""Each branch of the PPO loss against numbers computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rl8lite import AlgorithmConfig, ConfigError
from rl8lite.nn.ppo import ppo_loss as ppo_losses


def call(**overrides):
    args = {
        "logp": torch.tensor([[0.0]]),
        "old_logp": torch.tensor([[0.0]]),
        "advantages": torch.tensor([[1.0]]),
        "values": torch.tensor([[0.0]]),
        "old_values": torch.tensor([[0.0]]),
        "returns": torch.tensor([[0.0]]),
        "entropy": torch.tensor([[0.0]]),
        "clip_param": 0.2,
    }
    args.update(overrides)
    return ppo_losses(**args)


def test_unclipped_ratio_gives_minus_ratio_times_advantage() -> None:
    # r = exp(0.1) = 1.10517 < 1.2: L = -r * A = -2.21034
    out = call(logp=torch.tensor([[0.1]]), advantages=torch.tensor([[2.0]]))
    assert float(out.policy) == pytest.approx(-2.0 * math.exp(0.1), rel=1e-6)
    assert float(out.clip_fraction) == 0.0


def test_clip_caps_the_ratio_for_positive_advantages() -> None:
    # r = exp(0.5) = 1.6487 > 1.2, A = 2: min(3.297, 2.4) = 2.4
    out = call(logp=torch.tensor([[0.5]]), advantages=torch.tensor([[2.0]]))
    assert float(out.policy) == pytest.approx(-2.4, rel=1e-6)
    assert float(out.clip_fraction) == 1.0


def test_clip_for_negative_advantages_keeps_the_pessimistic_term() -> None:
    # r = exp(-0.5) = 0.6065 < 0.8, A = -1: min(-0.6065, -0.8) = -0.8
    out = call(logp=torch.tensor([[-0.5]]), advantages=torch.tensor([[-1.0]]))
    assert float(out.policy) == pytest.approx(0.8, rel=1e-6)


def test_dual_clip_bounds_large_ratios_with_negative_advantages() -> None:
    # r = exp(2) = 7.389, A = -1, c = 3: min(-7.389, -1.2) = -7.389; max(-7.389, -3) = -3
    without = call(logp=torch.tensor([[2.0]]), advantages=torch.tensor([[-1.0]]))
    dual = call(logp=torch.tensor([[2.0]]), advantages=torch.tensor([[-1.0]]), dual_clip_param=3.0)
    assert float(without.policy) == pytest.approx(math.exp(2.0), rel=1e-6)
    assert float(dual.policy) == pytest.approx(3.0, rel=1e-6)


def test_dual_clip_leaves_positive_advantages_alone() -> None:
    out = call(logp=torch.tensor([[2.0]]), advantages=torch.tensor([[1.0]]), dual_clip_param=3.0)
    assert float(out.policy) == pytest.approx(-1.2, rel=1e-6)


def test_value_loss_without_clip() -> None:
    # 0.5 * (3 - 1)^2 = 2
    out = call(values=torch.tensor([[3.0]]), returns=torch.tensor([[1.0]]))
    assert float(out.vf) == pytest.approx(2.0)


def test_value_clip_around_old_values() -> None:
    # V = 3, V_old = 0, c = 0.5 -> V_clipped = 0.5; R = 1:
    # max((3-1)^2, (0.5-1)^2) = 4 -> 0.5 * 4 = 2 (the unclipped error is larger)
    out = call(values=torch.tensor([[3.0]]), returns=torch.tensor([[1.0]]), vf_clip_param=0.5)
    assert float(out.vf) == pytest.approx(2.0)
    # V = 1.2, V_old = 0, c = 0.5 -> V_clipped = 0.5; R = 1.5:
    # max((1.2-1.5)^2, (0.5-1.5)^2) = 1 -> 0.5
    out = call(values=torch.tensor([[1.2]]), returns=torch.tensor([[1.5]]), vf_clip_param=0.5)
    assert float(out.vf) == pytest.approx(0.5)


def test_entropy_bonus_and_total() -> None:
    # policy = -1 (r = 1, A = 1), vf = 0.5 * 4 = 2, entropy = 0.7
    # total = -1 + 0.5 * 2 - 0.1 * 0.7 = -0.07
    out = call(
        values=torch.tensor([[2.0]]), entropy=torch.tensor([[0.7]]),
        vf_coeff=0.5, entropy_coeff=0.1,
    )
    assert float(out.entropy) == pytest.approx(0.7)
    assert float(out.total) == pytest.approx(-0.07, abs=1e-6)


def test_approximate_kl_is_the_r_minus_one_minus_log_r_estimator() -> None:
    # log r = 0.3: (e^0.3 - 1) - 0.3 = 0.049859
    out = call(logp=torch.tensor([[0.3]]))
    assert float(out.kl_div) == pytest.approx(math.exp(0.3) - 1 - 0.3, rel=1e-5)


def test_losses_are_means_over_the_batch() -> None:
    out = call(
        logp=torch.zeros(2, 1), old_logp=torch.zeros(2, 1),
        advantages=torch.tensor([[1.0], [3.0]]),
        values=torch.zeros(2, 1), old_values=torch.zeros(2, 1), returns=torch.zeros(2, 1),
        entropy=torch.zeros(2, 1),
    )
    assert float(out.policy) == pytest.approx(-2.0)


def rl8_value_loss(values: torch.Tensor, returns: torch.Tensor, vf_clip_param: float) -> torch.Tensor:
    """rl8 1.0.0's value loss (rl8/nn/functional.py), written out."""
    return torch.clamp(torch.nn.functional.smooth_l1_loss(values, returns, reduction="none"), 0.0, vf_clip_param).mean()


def test_smooth_l1_value_loss_is_rl8s_capped_huber_loss() -> None:
    values = torch.tensor([[0.5], [3.0], [-9.0], [0.0]], requires_grad=True)
    returns = torch.tensor([[0.0], [0.0], [0.0], [0.2]])
    zeros = torch.zeros(4, 1)
    batch = {"logp": zeros, "old_logp": zeros, "advantages": zeros, "old_values": zeros, "entropy": zeros}
    out = call(**batch, values=values, returns=returns, vf_loss="smooth_l1", vf_clip_param=5.0)
    # 0.5 * 0.5^2, |3| - 0.5, capped |-9| - 0.5 -> 5, 0.5 * 0.2^2
    assert out.vf.item() == pytest.approx((0.125 + 2.5 + 5.0 + 0.02) / 4)
    expected = rl8_value_loss(values, returns, 5.0)
    assert out.vf.item() == pytest.approx(expected.item())
    (grad,) = torch.autograd.grad(out.vf, values)
    (expected_grad,) = torch.autograd.grad(expected, values)
    torch.testing.assert_close(grad, expected_grad)
    assert grad[2].item() == 0.0  # beyond the cap the sample gives no gradient
    uncapped = call(**batch, values=values, returns=returns, vf_loss="smooth_l1", vf_clip_param=None)
    assert uncapped.vf.item() == pytest.approx((0.125 + 2.5 + 8.5 + 0.02) / 4)


def test_an_unknown_value_loss_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="vf_loss must be 'squared' or 'smooth_l1', received 'huber'"):
        AlgorithmConfig(vf_loss="huber").validate()  # type: ignore[arg-type]
