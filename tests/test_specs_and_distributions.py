"""Specs (zero/rand/assert_is_in) and distributions (log-probs against torch.distributions)."""

from __future__ import annotations

import math

import pytest
import torch

from rl8lite import distributions as D
from rl8lite.specs import (
    Bounded,
    Categorical,
    Composite,
    DiscreteTensorSpec,
    MultiCategorical,
    SpecError,
    Unbounded,
    UnboundedContinuousTensorSpec,
)


def test_torchrl_style_constructors_and_aliases() -> None:
    assert Unbounded(5).shape == torch.Size([5])
    assert UnboundedContinuousTensorSpec(shape=torch.Size([3]), dtype=torch.float64).dtype == torch.float64
    spec = DiscreteTensorSpec(3, shape=torch.Size([1]))
    assert isinstance(spec, Categorical) and spec.n == 3 and spec.shape == torch.Size([1])
    assert Bounded(-1.0, 2.0, shape=[2]).high.tolist() == [2.0, 2.0]


@pytest.mark.parametrize(
    "spec", [Unbounded(3), Bounded(-2.0, 2.0, shape=[2]), Categorical(4, shape=[1]), Categorical(4)]
)
def test_zero_and_rand_are_in_the_spec(spec) -> None:
    for value in (spec.zero([5]), spec.rand([5])):
        assert value.shape == torch.Size([5, *spec.shape])
        spec.assert_is_in(value)


def test_multi_categorical_holds_one_count_per_entry() -> None:
    spec = MultiCategorical([2, 5, 3])
    assert spec.shape == torch.Size([3]) and spec.dtype == torch.long and spec.nvec.tolist() == [2, 5, 3]
    values = spec.rand([4000])
    assert values.min(0).values.tolist() == [0, 0, 0] and values.max(0).values.tolist() == [1, 4, 2]
    spec.assert_is_in(values)
    with pytest.raises(SpecError, match=r"e.g. 2 at index \[0, 0\] outside \[0, 1\]"):
        spec.assert_is_in(torch.tensor([[2, 0, 0]]))
    assert MultiCategorical(3, shape=[2]).nvec.tolist() == [3, 3]
    assert spec.to("cpu") == spec and spec != Bounded(0, torch.tensor([1, 4, 2]), dtype=torch.long)
    assert repr(spec) == "MultiCategorical(nvec=[2, 5, 3], shape=[3], dtype=torch.int64, device=cpu)"
    with pytest.raises(SpecError, match=r"nvec entries must be >= 1, received \[2, 0\]"):
        MultiCategorical([2, 0])


def test_composite_zero_rand_and_nested_errors() -> None:
    spec = Composite(obs=Unbounded(3), action_mask=Categorical(2, shape=[4]))
    td = spec.rand([6])
    assert td.batch_size == torch.Size([6]) and td["obs"].shape == torch.Size([6, 3])
    spec.assert_is_in(td)
    del td["obs"]
    with pytest.raises(SpecError, match=r"missing key\(s\) \['obs'\]"):
        spec.assert_is_in(td, key="reset output")


def test_assert_is_in_names_key_expected_and_received() -> None:
    with pytest.raises(SpecError, match=r"obs: expected shape \[\.\.\., 3\].*received \[5, 4\]"):
        Unbounded(3).assert_is_in(torch.zeros(5, 4), key="obs")
    with pytest.raises(SpecError, match=r"obs: expected dtype torch.float32, received torch.float64"):
        Unbounded(3).assert_is_in(torch.zeros(5, 3, dtype=torch.float64), key="obs")
    with pytest.raises(SpecError, match=r"a: 1 value\(s\) outside the bounds, e.g. 3.0 at index \[1, 0\] outside \[-1.0, 1.0\]"):
        Bounded(-1.0, 1.0, shape=[1]).assert_is_in(torch.tensor([[0.5], [3.0]]), key="a")
    # per-element bounds: the offender's own bounds, not the spec's overall range
    with pytest.raises(SpecError, match=r"e.g. 5.0 at index \[0, 0\] outside \[0.0, 1.0\]"):
        Bounded([0.0, 10.0], [1.0, 11.0]).assert_is_in(torch.tensor([[5.0, 5.0]]))
    with pytest.raises(SpecError, match=r"outside \{0, \.\.\., 1\}"):
        Categorical(2).assert_is_in(torch.tensor([0, 2]))


def test_categorical_matches_torch_and_respects_masks() -> None:
    torch.manual_seed(0)
    spec = Categorical(4, shape=[1])
    logits = torch.randn(64, 4)
    dist = D.Categorical(logits, spec)
    ref = torch.distributions.Categorical(logits=logits)
    actions = dist.sample()
    assert actions.shape == torch.Size([64, 1])
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions[:, 0])[:, None])
    torch.testing.assert_close(dist.entropy(), ref.entropy()[:, None])
    mask = torch.tensor([[True, False, True, False]]).expand(64, 4)
    masked = D.Categorical(logits, spec, action_mask=mask)
    samples = torch.cat([masked.sample() for _ in range(50)])
    assert set(samples.flatten().tolist()) <= {0, 2}
    assert set(masked.deterministic_sample().flatten().tolist()) <= {0, 2}
    probs = masked.log_probs.exp()
    assert torch.all(probs[:, 1] == 0) and torch.all(probs[:, 3] == 0)
    assert torch.isfinite(masked.entropy()).all()


def test_normal_matches_torch() -> None:
    torch.manual_seed(0)
    spec = Unbounded(2)
    features = 0.5 * torch.randn(32, 4)  # log-stds inside the clamp range [-20, 2]
    dist = D.Normal(features, spec)
    mean, log_std = features.chunk(2, -1)
    ref = torch.distributions.Normal(mean, log_std.exp())
    actions, logp = dist.sample_with_logp()
    torch.testing.assert_close(logp, ref.log_prob(actions).sum(-1, keepdim=True))
    torch.testing.assert_close(dist.logp(actions), logp)
    torch.testing.assert_close(dist.entropy(), ref.entropy().sum(-1, keepdim=True))
    torch.testing.assert_close(dist.deterministic_sample(), mean)


def test_squashed_normal_stays_in_bounds_and_logp_is_consistent() -> None:
    torch.manual_seed(0)
    spec = Bounded(-2.0, 4.0, shape=[1])
    features = 0.5 * torch.randn(256, 2)
    dist = D.SquashedNormal(features, spec)
    actions, logp = dist.sample_with_logp()
    assert actions.min() >= -2.0 and actions.max() <= 4.0
    torch.testing.assert_close(dist.logp(actions), logp, rtol=1e-3, atol=1e-3)
    # Change of variables: log p(a) = log N(u) - log(scale * (1 - tanh(u)^2)), scale = 3
    mean, log_std = features.chunk(2, -1)
    u = torch.atanh((actions - 1.0) / 3.0)
    ref = torch.distributions.Normal(mean, log_std.exp()).log_prob(u) - torch.log(3.0 * (1 - torch.tanh(u) ** 2))
    inside = (torch.tanh(u).abs() < 0.99).flatten()  # the 1e-6 log guard only matters at saturation
    assert inside.float().mean() > 0.9
    torch.testing.assert_close(logp[inside], ref[inside], rtol=1e-3, atol=1e-3)


def test_default_distribution_and_num_inputs() -> None:
    assert D.default_distribution_cls(Categorical(3)) is D.Categorical
    assert D.default_distribution_cls(Bounded(-1.0, 1.0, shape=[2])) is D.SquashedNormal
    assert D.default_distribution_cls(Unbounded(2)) is D.Normal
    assert D.Normal.num_inputs(Unbounded(3)) == 6
    assert D.Categorical.num_inputs(Categorical(5, shape=[1])) == 5
    with pytest.raises(TypeError, match="Categorical needs a Categorical action spec"):
        D.Categorical.num_inputs(Unbounded(2))
    entropy = float(D.Normal(torch.zeros(1, 2), Unbounded(1)).entropy())
    assert entropy == pytest.approx(0.5 + 0.5 * math.log(2 * math.pi), rel=1e-6)


def test_squashed_normal_sampling_logp_equals_the_recomputed_one_even_when_saturated() -> None:
    torch.manual_seed(0)
    spec = Bounded(-2.0, 2.0, shape=[1])
    features = torch.cat([torch.full((4096, 1), 3.0), torch.full((4096, 1), 2.0)], -1)  # log_std 2
    dist = D.SquashedNormal(features, spec)
    actions, logp = dist.sample_with_logp()
    assert (actions.abs() > 1.99999).float().mean() > 0.2  # many saturated samples
    assert torch.equal(dist.logp(actions), logp)  # PPO's ratio is exactly 1 before an update


def test_mlp_forward_equals_plain_sequential_and_keeps_its_own_hooks() -> None:
    from rl8lite.models.default import mlp

    torch.manual_seed(0)
    fast = mlp(4, [16, 16], 3, "tanh", out_gain=0.01)
    plain = torch.nn.Sequential(*fast)
    x = torch.randn(5, 4, requires_grad=True)
    torch.testing.assert_close(fast(x), plain(x), rtol=0, atol=0)
    fast(x).sum().backward()
    assert x.grad is not None and fast[0].weight.grad is not None
    seen: list[tuple[int, ...]] = []
    fast.register_forward_hook(lambda module, args, out: seen.append(tuple(out.shape)))
    fast(x)
    assert seen == [(5, 3)]
    assert list(fast.state_dict()) == list(plain.state_dict())


@pytest.mark.parametrize("rows", [8, 256])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gives_nn_linear_outputs_and_gradients_on_both_paths(rows: int, bias: bool) -> None:
    from rl8lite.models.default import Linear

    torch.manual_seed(0)
    plain = torch.nn.Linear(5, 64, bias=bias)
    fast = Linear(5, 64, bias=bias)
    fast.load_state_dict(plain.state_dict())
    x = torch.randn(rows, 5, requires_grad=True)
    g = torch.randn(rows, 64)
    for layer in (plain, fast):
        layer(x).backward(g)
    torch.testing.assert_close(fast(x), plain(x))
    assert x.grad is not None
    for p_fast, p_plain in zip(fast.parameters(), plain.parameters()):
        assert p_fast.grad is not None and p_plain.grad is not None
        assert p_fast.grad.is_contiguous() and p_fast.grad.shape == p_plain.grad.shape
        torch.testing.assert_close(p_fast.grad, p_plain.grad)
    # A second backward accumulates (chunked updates rely on it).
    fast(x).backward(g)
    torch.testing.assert_close(fast.weight.grad, 2 * plain.weight.grad, rtol=1e-5, atol=1e-4)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), plain(x))
    assert list(fast.state_dict()) == list(plain.state_dict())


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
def test_mlp_gradients_equal_a_plain_out_of_place_mlp(activation: str) -> None:
    from rl8lite.models.default import mlp

    torch.manual_seed(0)
    fast = mlp(5, [128, 128], 3, activation, out_gain=1.0)
    plain_activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "elu": torch.nn.ELU}[activation]
    layers: list[torch.nn.Module] = []
    for layer in fast:
        if isinstance(layer, torch.nn.Linear):
            copy = torch.nn.Linear(layer.in_features, layer.out_features)
            copy.load_state_dict(layer.state_dict())
            layers.append(copy)
        else:
            layers.append(plain_activation())
    plain = torch.nn.Sequential(*layers)
    x = torch.randn(300, 5)  # enough rows for Linear's transposed weight gradient
    for model in (fast, plain):
        model(x).square().sum().backward()
    torch.testing.assert_close(fast(x), plain(x))
    for p_fast, p_plain in zip(fast.parameters(), plain.parameters()):
        torch.testing.assert_close(p_fast.grad, p_plain.grad, rtol=1e-5, atol=1e-5)


def test_categorical_samples_follow_the_probabilities_and_never_a_masked_action() -> None:
    torch.manual_seed(0)
    spec = Categorical(4, shape=[1])
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    logits = torch.log(probs.clamp_min(1e-12)).expand(200_000, 4)
    mask = (probs > 0).expand(200_000, 4)
    actions, logp = D.Categorical(logits, spec, action_mask=mask).sample_with_logp()
    frequencies = torch.bincount(actions.flatten(), minlength=4).double() / actions.shape[0]
    # 200k draws: the standard error of each frequency is < 0.0011.
    torch.testing.assert_close(frequencies, probs.double(), atol=0.005, rtol=0)
    assert frequencies[1] == 0
    torch.testing.assert_close(logp, torch.log(probs)[actions])


def test_categorical_never_samples_a_masked_action_even_when_the_uniform_draw_is_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # U = 0 for every action: the one allowed action must still win.
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.zeros(shape, **kw))
    spec = Categorical(3, shape=[1])
    mask = torch.tensor([[False, True, False]]).expand(5, 3)
    actions, logp = D.Categorical(torch.randn(5, 3), spec, action_mask=mask).sample_with_logp()
    assert actions.flatten().tolist() == [1] * 5
    assert torch.isfinite(logp).all()


def test_categorical_samples_bf16_features_with_float32_noise() -> None:
    torch.manual_seed(0)
    spec = Categorical(2, shape=[1])
    logits = torch.log(torch.tensor([0.999, 0.001])).expand(400_000, 2).bfloat16()
    actions, _ = D.Categorical(logits, spec).sample_with_logp()
    rare = actions.float().mean().item()
    # bf16 noise drew it ~0.002 of the time; with float32 noise 0.001 +- 0.00005 (std).
    assert 0.0008 < rare < 0.0012


def test_log_probabilities_of_half_precision_features_are_computed_in_float32() -> None:
    # An fp32 action near a bound, rounded to bf16, would sit on it: atanh(1) = inf.
    spec = Bounded(-2.0, 2.0, shape=[1])
    features = torch.tensor([[1.8, -3.0]])
    action = torch.tensor([[1.9964]])
    exact = D.SquashedNormal(features, spec).logp(action)
    half = D.SquashedNormal(features.bfloat16(), spec).logp(action)
    assert torch.isfinite(half).all() and half.dtype == torch.float32
    torch.testing.assert_close(half, exact, rtol=0.05, atol=0.05)
    assert D.Normal(torch.zeros(1, 2, dtype=torch.float64), Unbounded(1)).logp(torch.zeros(1, 1)).dtype == torch.float64
