"""The default model's in-place tanh: torch's tanh for small tensors, 2 sigmoid(2x) - 1 for large ones on CPU."""

from __future__ import annotations

import torch

from rl8lite.models.mlp import SIGMOID_TANH_MIN_ELEMENTS, InplaceTanh


def test_large_float32_tensors_get_tanh_within_rounding_and_its_exact_gradient() -> None:
    torch.manual_seed(0)
    x = (torch.randn(SIGMOID_TANH_MIN_ELEMENTS // 16, 16) * 4).requires_grad_()
    linear = torch.nn.Linear(16, 16)
    y = InplaceTanh()(linear(x))
    reference = torch.tanh(linear(x).double())
    assert (y.double() - reference).abs().max() < 3e-7
    assert not torch.equal(y, torch.tanh(linear(x)))  # the sigmoid formula did run
    grad = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, grad)
    # tanh's backward on the output: grad * (1 - y^2), then through the linear layer
    expected = (grad * (1 - y.detach().square())) @ linear.weight
    torch.testing.assert_close(dx, expected, rtol=1e-5, atol=1e-6)
    with torch.inference_mode():
        z = torch.randn(SIGMOID_TANH_MIN_ELEMENTS)
        assert (InplaceTanh()(z.clone()).double() - torch.tanh(z.double())).abs().max() < 3e-7


def test_small_and_low_precision_tensors_keep_torchs_tanh_exactly() -> None:
    x = torch.randn(8, 64)
    assert torch.equal(InplaceTanh()(x.clone()), torch.tanh(x))
    big = torch.randn(SIGMOID_TANH_MIN_ELEMENTS, dtype=torch.bfloat16)
    assert torch.equal(InplaceTanh()(big.clone()), torch.tanh(big))


def test_compiled_code_keeps_torchs_tanh() -> None:
    x = torch.randn(SIGMOID_TANH_MIN_ELEMENTS)
    compiled = torch.compile(lambda t: InplaceTanh()(t.clone()), backend="eager")
    assert torch.equal(compiled(x), torch.tanh(x))
