"""The update's gradient norm and clipping equal torch.nn.utils' on every path."""

from __future__ import annotations

import pytest
import torch

from rl8lite.algorithms.update import clip_grads_to_norm_, total_grad_norm


def _params(dtypes: list[torch.dtype], scale: float) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    params = []
    for i, dtype in enumerate(dtypes):
        p = torch.nn.Parameter(torch.zeros(3 + i, 2, dtype=dtype))
        p.grad = (scale * torch.randn(3 + i, 2, generator=generator)).to(dtype)
        params.append(p)
    return params


@pytest.mark.parametrize("dtypes", [[torch.float32] * 4, [torch.float32, torch.float64, torch.float32]])
@pytest.mark.parametrize("scale", [0.01, 10.0])  # below and above max_norm
def test_norm_and_clip_match_torch(dtypes: list[torch.dtype], scale: float) -> None:
    ours, theirs = _params(dtypes, scale), _params(dtypes, scale)
    norm = total_grad_norm([p.grad for p in ours])
    expected = torch.nn.utils.get_total_norm([p.grad for p in theirs])
    torch.testing.assert_close(norm, expected.to(norm.dtype))
    clip_grads_to_norm_(ours, 1.0, norm)
    torch.nn.utils.clip_grads_with_norm_(theirs, 1.0, expected)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    clipped = float(total_grad_norm([p.grad for p in ours]))
    assert clipped == pytest.approx(min(1.0, float(expected)), rel=1e-4)


def test_non_finite_gradients_give_a_non_finite_norm() -> None:
    params = _params([torch.float32] * 3, 1.0)
    params[1].grad[0, 0] = float("nan")
    assert not torch.isfinite(total_grad_norm([p.grad for p in params]))
    params[1].grad[0, 0] = float("inf")
    assert total_grad_norm([p.grad for p in params]) == float("inf")


def test_no_gradients() -> None:
    assert float(total_grad_norm([], device="cpu")) == 0.0
    p = torch.nn.Parameter(torch.ones(2))
    clip_grads_to_norm_([p], 1.0, torch.tensor(5.0))  # nothing to scale, no error
    assert p.grad is None
