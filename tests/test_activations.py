"""The default model's layers: in-place tanh is torch's tanh (on AMD CPUs in float32, 2
sigmoid(2x) - 1 within 3e-7 of it), and its gradient is tanh's."""

from __future__ import annotations

import pytest
import torch

from rl8lite.models import default
from rl8lite.models.default import InplaceTanh


def test_the_sigmoid_formula_is_chosen_by_the_cpu_vendor_alone() -> None:
    try:
        with open("/proc/cpuinfo") as f:
            amd = "AuthenticAMD" in f.read()
    except OSError:
        amd = False
    assert default.TANH_VIA_SIGMOID == amd
    x = torch.randn(64, 8, dtype=torch.bfloat16)
    assert torch.equal(InplaceTanh()(x.clone()), torch.tanh(x))  # other dtypes: torch's tanh


@pytest.mark.parametrize("via_sigmoid", [False, True])
def test_inplace_tanh_is_torchs_tanh_with_its_gradient(via_sigmoid: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default, "TANH_VIA_SIGMOID", via_sigmoid)
    torch.manual_seed(0)
    x = (torch.randn(512, 16) * 4).requires_grad_()
    linear = torch.nn.Linear(16, 16)
    y = InplaceTanh()(linear(x))
    if via_sigmoid:
        torch.testing.assert_close(y, torch.tanh(linear(x)), rtol=0, atol=3e-7)
    else:
        assert torch.equal(y, torch.tanh(linear(x)))
    grad = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, grad)
    # tanh's backward on the output: grad * (1 - y^2), then through the linear layer
    torch.testing.assert_close(dx, (grad * (1 - y.detach().square())) @ linear.weight, rtol=1e-5, atol=1e-6)


def test_the_result_of_a_row_does_not_depend_on_the_batch() -> None:
    # accumulated minibatches and whole-buffer passes must see the same activations
    x = torch.randn(4096, 64)
    with torch.inference_mode():
        whole = InplaceTanh()(x.clone())
        parts = torch.cat([InplaceTanh()(x[i : i + 8].clone()) for i in range(0, 4096, 8)])
    assert torch.equal(whole, parts)
