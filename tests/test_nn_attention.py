"""rl8lite.nn attention blocks, perceivers and the pointer network, against a reference written
from the primitives (per-head softmax loops, explicit layer norms) rather than the modules' code."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from torch import nn

import rl8lite.nn.modules
from rl8lite.nn import (
    CrossAttention,
    PerceiverIOLayer,
    PerceiverLayer,
    PointerNetwork,
    SelfAttention,
    SelfAttentionStack,
)

E, HEADS = 8, 2


def layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + norm.eps) * norm.weight + norm.bias


def attention(q: torch.Tensor, kv: torch.Tensor, mha: nn.MultiheadAttention, padding=None, blocked=None):
    """Multihead attention one batch element and head at a time; ``padding`` ``[B, K]`` and
    ``blocked`` ``[Q, K]`` are ``True`` where a key may not be attended to."""
    w_q, w_k, w_v = mha.in_proj_weight.chunk(3)
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
    d = q.shape[-1] // mha.num_heads
    heads = torch.zeros(q.shape)
    for b in range(q.shape[0]):
        for h in range(mha.num_heads):
            part = slice(h * d, (h + 1) * d)
            qh, kh = q[b] @ w_q[part].T + b_q[part], kv[b] @ w_k[part].T + b_k[part]
            vh = kv[b] @ w_v[part].T + b_v[part]
            scores = qh @ kh.T / math.sqrt(d)
            if padding is not None:
                scores = scores.masked_fill(padding[b].unsqueeze(0), -math.inf)
            if blocked is not None:
                scores = scores.masked_fill(blocked, -math.inf)
            heads[b, :, part] = torch.softmax(scores, dim=-1) @ vh
    return heads @ mha.out_proj.weight.T + mha.out_proj.bias


def feedforward(x: torch.Tensor, net: nn.Sequential) -> torch.Tensor:
    norm, first, _, _, second = net
    return torch.relu(layer_norm(x, norm) @ first.weight.T + first.bias) @ second.weight.T + second.bias


def joined(x: torch.Tensor, y: torch.Tensor, kind: str | None, fan_in: nn.Module) -> torch.Tensor:
    if kind == "residual":
        return x + y
    if kind == "cat":
        return torch.cat([x, y], -1) @ fan_in.weight.T + fan_in.bias
    return y


def block(block: CrossAttention | SelfAttention, queries: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """The block's output given its attention output: skip-join, feedforward, skip-join."""
    kind, (fan_in_seed, net, fan_in_net) = block.skip_connection.kind, next(block.skip_connection.children())
    y = joined(queries, attended, kind, fan_in_seed)
    return joined(y, feedforward(y, net), kind, fan_in_net)


def reference_cross(module: CrossAttention, q, kv, padding=None, blocked=None) -> torch.Tensor:
    return block(module, q, attention(layer_norm(q, module.q_norm), layer_norm(kv, module.kv_norm),
                                      module.attention, padding, blocked))


def reference_self(module: SelfAttention, x, padding=None, blocked=None) -> torch.Tensor:
    normed = layer_norm(x, module.x_norm)
    return block(module, x, attention(normed, normed, module.attention, padding, blocked))


def inputs(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


PADDING = torch.tensor([[False, False, False, True, True], [True, False, False, False, False]])


@pytest.mark.parametrize("skip_kind", ["cat", "residual", None])
def test_cross_attention_matches_the_reference(skip_kind: str | None) -> None:
    torch.manual_seed(0)
    module = CrossAttention(E, num_heads=HEADS, hidden_dim=16, skip_kind=skip_kind).eval()
    q, kv = inputs(2, 3, E, seed=1), inputs(2, 5, E, seed=2)
    blocked = torch.tensor([[False, True, False, False, False]] * 3)
    out = module(q, kv, PADDING, blocked)
    assert out.shape == (2, 3, E)
    assert torch.allclose(out, reference_cross(module, q, kv, PADDING, blocked), atol=1e-5)


@pytest.mark.parametrize("skip_kind", ["cat", "residual", None])
def test_self_attention_matches_the_reference(skip_kind: str | None) -> None:
    torch.manual_seed(0)
    module = SelfAttention(E, num_heads=HEADS, hidden_dim=16, skip_kind=skip_kind).eval()
    x = inputs(2, 5, E, seed=3)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    out = module(x, key_padding_mask=PADDING, attention_mask=causal)
    reference = reference_self(module, x, PADDING, causal)
    assert out.shape == (2, 5, E)
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[1, 0] = False  # the first element of copy 1 is padding that may only attend to itself: NaN in both
    assert torch.allclose(out[valid], reference[valid], atol=1e-5)


def test_padding_never_reaches_the_unpadded_outputs() -> None:
    torch.manual_seed(0)
    stack = SelfAttentionStack(SelfAttention(E, num_heads=HEADS, hidden_dim=16), 2).eval()
    x = inputs(2, 5, E, seed=4)
    changed = x.clone()
    changed[PADDING] = 1e3
    valid = ~PADDING
    assert torch.allclose(stack(x, PADDING)[valid], stack(changed, PADDING)[valid], atol=1e-5)


def test_a_stack_applies_each_layer_in_turn_with_the_same_masks() -> None:
    torch.manual_seed(0)
    stack = SelfAttentionStack(SelfAttention(E, num_heads=HEADS, hidden_dim=16, skip_kind="residual"), 3).eval()
    x = inputs(2, 5, E, seed=5)
    expected = x
    for layer in stack.layers:
        expected = reference_self(layer, expected, PADDING)
    assert torch.allclose(stack(x, key_padding_mask=PADDING)[~PADDING], expected[~PADDING], atol=1e-4)


def test_a_stack_shares_one_layer_or_holds_independent_copies() -> None:
    layer = SelfAttention(E, hidden_dim=16)
    shared = SelfAttentionStack(layer, 3, share_parameters=True)
    copies = SelfAttentionStack(layer, 3)
    def count(module: nn.Module) -> int:
        return sum(p.numel() for p in module.parameters())

    assert all(m is layer for m in shared.layers) and count(shared) == count(layer)
    assert len({id(m) for m in copies.layers} | {id(layer)}) == 4 and count(copies) == 3 * count(layer)
    with torch.no_grad():
        copies.layers[0].x_norm.weight.add_(1.0)
    assert not torch.equal(copies.layers[0].x_norm.weight, copies.layers[1].x_norm.weight)


def test_perceiver_layer_cross_attends_then_self_attends() -> None:
    torch.manual_seed(0)
    layer = PerceiverLayer(E, num_heads=HEADS, hidden_dim=16, num_layers=2).eval()
    q, kv = inputs(2, 3, E, seed=6), inputs(2, 5, E, seed=7)
    expected = reference_cross(layer.cross_attention, q, kv, PADDING)
    for self_layer in layer.self_attention.layers:
        expected = reference_self(self_layer, expected)
    out = layer(q, kv, PADDING)
    assert out.shape == (2, 3, E)
    assert torch.allclose(out, expected, atol=1e-4)


def test_perceiver_io_reads_the_latent_array_out_with_its_output_query() -> None:
    torch.manual_seed(0)
    layer = PerceiverIOLayer(E, 4, num_heads=HEADS, hidden_dim=16, num_layers=1, share_parameters=True).eval()
    bound = math.sqrt(6 / (4 + E))  # Xavier-uniform
    assert layer.output_query.shape == (4, E) and layer.output_query.abs().max() <= bound
    q, kv = inputs(2, 3, E, seed=8), inputs(2, 5, E, seed=9)
    latent = layer.perceiver_layer(q, kv, PADDING)
    out = layer(q, kv, PADDING)
    assert out.shape == (2, 4, E)
    assert torch.allclose(out, reference_cross(layer.decoder, layer.output_query.expand(2, -1, -1), latent),
                          atol=1e-5)
    changed = kv.clone()
    changed[PADDING] = -50.0
    assert torch.allclose(layer(q, changed, PADDING), out, atol=1e-5)


@torch.no_grad()
def test_pointer_network_scores_each_pair_and_normalises_over_the_allowed_elements() -> None:
    torch.manual_seed(0)
    pointer = PointerNetwork(4)
    decoder, encoder = inputs(2, 3, 4, seed=10), inputs(2, 5, 4, seed=11)
    mask = inputs(2, 3, 5, seed=12) > -0.5
    mask[..., 0] = True
    out = pointer(decoder, encoder, mask)
    assert out.shape == (2, 3, 5)
    v, w1, w2 = pointer.VT.weight[0], pointer.W1.weight, pointer.W2.weight
    for b in range(2):
        for d in range(3):
            scores = [float(v @ torch.tanh(w1 @ encoder[b, e] + w2 @ decoder[b, d])) for e in range(5)]
            norm = math.log(sum(math.exp(s) for s, ok in zip(scores, mask[b, d]) if ok))
            for e in range(5):
                if mask[b, d, e]:
                    assert float(out[b, d, e]) == pytest.approx(scores[e] - norm, abs=1e-5)
                else:
                    assert out[b, d, e].exp() == 0.0
    assert torch.allclose(pointer(decoder, encoder).exp().sum(-1), torch.ones(2, 3))


def test_docstring_examples_run() -> None:
    torch.manual_seed(0)
    assert doctest.testmod(rl8lite.nn.modules).failed == 0
