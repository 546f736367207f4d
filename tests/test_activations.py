"""The default model's in-place tanh: on float32 CPU tensors 2 sigmoid(2x) - 1 where the CPU's
tanh kernel is slow (``cpu_tanh_formula``), torch's tanh otherwise."""

from __future__ import annotations

import copy
import time

import pytest
import torch

from rl8lite.models import mlp
from rl8lite.models.mlp import InplaceTanh


@pytest.fixture(params=["sigmoid", "tanh"])
def formula(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(mlp, "_cpu_tanh", request.param)
    return request.param


def test_float32_tensors_get_tanh_within_rounding_and_its_exact_gradient(formula: str) -> None:
    torch.manual_seed(0)
    x = (torch.randn(512, 16) * 4).requires_grad_()
    linear = torch.nn.Linear(16, 16)
    y = InplaceTanh()(linear(x))
    reference = torch.tanh(linear(x).double())
    assert (y.double() - reference).abs().max() < 3e-7
    # the formula chosen is the one that ran
    assert torch.equal(y, torch.tanh(linear(x))) == (formula == "tanh")
    grad = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, grad)
    # tanh's backward on the output: grad * (1 - y^2), then through the linear layer
    expected = (grad * (1 - y.detach().square())) @ linear.weight
    torch.testing.assert_close(dx, expected, rtol=1e-5, atol=1e-6)


def test_the_sigmoid_formula_is_the_one_written_before() -> None:
    # 2 sigmoid(2x) - 1 with scalar multiplications, bit for bit (pinned results rely on it)
    x = torch.randn(64, 32) * 3
    expected = (x * 2.0).sigmoid().mul(2.0).sub(1.0)
    assert torch.equal(mlp._tanh_via_sigmoid_(x.clone()), expected)


def test_the_result_of_a_row_does_not_depend_on_the_batch(formula: str) -> None:
    # accumulated minibatches and whole-buffer passes must see the same activations
    x = torch.randn(4096, 64)
    with torch.inference_mode():
        whole = InplaceTanh()(x.clone())
        parts = torch.cat([InplaceTanh()(x[i : i + 8].clone()) for i in range(0, 4096, 8)])
    assert torch.equal(whole, parts)


def test_low_precision_tensors_keep_torchs_tanh(formula: str) -> None:
    big = torch.randn(4096, dtype=torch.bfloat16)
    assert torch.equal(InplaceTanh()(big.clone()), torch.tanh(big))


def test_compiled_code_computes_the_same_formula(formula: str) -> None:
    x = torch.randn(4096)
    compiled = torch.compile(lambda t: InplaceTanh()(t.clone()), backend="eager")
    with torch.inference_mode():
        eager = InplaceTanh()(x.clone())
    torch.testing.assert_close(compiled(x), eager, rtol=0, atol=1e-7)
    torch._dynamo.reset()


def test_the_environment_variable_sets_the_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mlp, "_cpu_tanh", None)
    monkeypatch.setenv("RL8LITE_CPU_TANH", "Sigmoid")
    assert mlp.cpu_tanh_formula() == "sigmoid"
    monkeypatch.setattr(mlp, "_cpu_tanh", None)
    monkeypatch.setenv("RL8LITE_CPU_TANH", "fast")
    with pytest.raises(ValueError, match="RL8LITE_CPU_TANH.*'fast'"):
        mlp.cpu_tanh_formula()


@pytest.mark.parametrize("slow", ["tanh", "sigmoid"])
def test_without_the_variable_the_faster_formula_is_measured(
    slow: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sleepy(kernel):  # 5 ms more than the other one's ~0.1-2 ms
        return lambda x: (time.sleep(0.005), kernel(x))[1]

    monkeypatch.setitem(mlp._KERNELS, slow, sleepy(mlp._KERNELS[slow]))
    monkeypatch.setattr(mlp, "_cpu_tanh", None)
    monkeypatch.delenv("RL8LITE_CPU_TANH", raising=False)
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    with torch.device("meta"):  # a default device the caller set does not reach the measurement
        chosen = mlp.cpu_tanh_formula()
    assert chosen == {"tanh": "sigmoid", "sigmoid": "tanh"}[slow]
    assert mlp.cpu_tanh_formula() == chosen  # decided once
    assert torch.equal(torch.get_rng_state(), rng)  # seeded runs do not see the measurement
    assert torch.get_num_threads() == threads


def test_the_formula_needs_tanh_to_be_clearly_slower() -> None:
    assert mlp._faster_formula(tanh_seconds=1.8, sigmoid_seconds=0.5) == "sigmoid"
    assert mlp._faster_formula(tanh_seconds=0.6, sigmoid_seconds=0.5) == "tanh"  # within the margin
    assert mlp._faster_formula(tanh_seconds=0.4, sigmoid_seconds=0.8) == "tanh"


def test_an_unpickled_model_has_its_formula_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = InplaceTanh()
    monkeypatch.setattr(mlp, "_cpu_tanh", None)  # as in a fresh process
    monkeypatch.setenv("RL8LITE_CPU_TANH", "sigmoid")
    copy.deepcopy(layer)
    assert mlp._cpu_tanh == "sigmoid"
