"""The default model's in-place tanh: 2 sigmoid(2x) - 1 on float32 CPU tensors, torch's tanh otherwise."""

from __future__ import annotations

import torch

from rl8lite.models.mlp import InplaceTanh


def test_float32_tensors_get_tanh_within_rounding_and_its_exact_gradient() -> None:
    torch.manual_seed(0)
    x = (torch.randn(512, 16) * 4).requires_grad_()
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


def test_the_result_of_a_row_does_not_depend_on_the_batch() -> None:
    # accumulated minibatches and whole-buffer passes must see the same activations
    x = torch.randn(4096, 64)
    with torch.inference_mode():
        whole = InplaceTanh()(x.clone())
        parts = torch.cat([InplaceTanh()(x[i : i + 8].clone()) for i in range(0, 4096, 8)])
    assert torch.equal(whole, parts)


def test_low_precision_tensors_keep_torchs_tanh() -> None:
    big = torch.randn(4096, dtype=torch.bfloat16)
    assert torch.equal(InplaceTanh()(big.clone()), torch.tanh(big))


def test_compiled_code_computes_the_same_formula() -> None:
    x = torch.randn(4096)
    compiled = torch.compile(lambda t: InplaceTanh()(t.clone()), backend="eager")
    with torch.inference_mode():
        eager = InplaceTanh()(x.clone())
    torch.testing.assert_close(compiled(x), eager, rtol=0, atol=1e-7)
