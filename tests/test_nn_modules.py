"""rl8lite.nn layers other than attention: MLP, activations, positional embeddings, skip connections,
against hand-computed numbers or plain matrix products."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
from torch import nn

import rl8lite.nn.modules
from rl8lite.nn import (
    MLP,
    Module,
    PositionalEmbedding,
    SequentialSkipConnection,
    SquaredReLU,
    get_activation,
)
from rl8lite.nn.modules import ACTIVATIONS


def set_linear(linear: nn.Linear, weight: list[list[float]], bias: list[float] | None = None) -> None:
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight))
        if bias is not None:
            linear.bias.copy_(torch.tensor(bias))


def test_mlp_layers_follow_linear_norm_activation_dropout() -> None:
    mlp = MLP(3, [4, 5, 2], activation_fn="tanh", norm_layer=nn.LayerNorm, dropout=0.1)
    assert [type(layer).__name__ for layer in mlp] == [
        "Linear", "LayerNorm", "Tanh", "Dropout", "Linear", "LayerNorm", "Tanh", "Dropout", "Linear",
    ]
    assert [(layer.in_features, layer.out_features) for layer in mlp if isinstance(layer, nn.Linear)] == [
        (3, 4), (4, 5), (5, 2),
    ]
    assert [type(layer).__name__ for layer in MLP(3, [2])] == ["Linear"]


def test_mlp_computes_the_chain_of_affine_maps_and_activations() -> None:
    mlp = MLP(2, [2, 1])
    set_linear(mlp[0], [[1.0, -1.0], [2.0, 0.5]], [0.0, -1.0])
    set_linear(mlp[2], [[3.0, -2.0]], [0.25])
    # x = (1, 2): hidden = relu((1 - 2, 2 + 1 - 1)) = (0, 2); out = -4 + 0.25
    assert mlp(torch.tensor([[1.0, 2.0]])).tolist() == [[-3.75]]


def test_mlp_options_reach_its_layers() -> None:
    mlp = MLP(2, [3, 1], bias=False, inplace=True)
    assert all(layer.bias is None for layer in mlp if isinstance(layer, nn.Linear))
    assert mlp[1].inplace
    with pytest.raises(ValueError, match="hiddens is empty"):
        MLP(2, [])


def test_get_activation_builds_each_registered_activation_with_its_arguments() -> None:
    for name, cls in ACTIVATIONS.items():
        assert type(get_activation(name)) is cls
    assert get_activation("leaky_relu", negative_slope=0.3).negative_slope == 0.3
    assert get_activation("swish")(torch.tensor([1.0])).item() == pytest.approx(1 / (1 + math.exp(-1)))
    with pytest.raises(ValueError, match=r"no activation named 'reLU': choose one of \['elu', "):
        get_activation("reLU")


def test_squared_relu_by_hand() -> None:
    assert SquaredReLU()(torch.tensor([-2.0, -0.5, 0.0, 1.5, 3.0])).tolist() == [0.0, 0.0, 0.0, 2.25, 9.0]
    assert get_activation("squared_relu")(torch.tensor([2.0])).item() == 4.0


@pytest.mark.parametrize("embed_dim", [4, 5])
def test_positional_embedding_adds_the_sinusoids_of_each_position(embed_dim: int) -> None:
    embedding = PositionalEmbedding(embed_dim, 6)
    x = torch.randn(2, 3, embed_dim, generator=torch.Generator().manual_seed(0))
    out = embedding(x)
    for p in range(3):
        codes = []
        for i in range(embed_dim):
            angle = p / 10_000 ** ((i - i % 2) / embed_dim)
            codes.append(math.sin(angle) if i % 2 == 0 else math.cos(angle))
        for b in range(2):
            assert (out[b, p] - x[b, p]).tolist() == pytest.approx(codes, abs=1e-6)
    assert embedding.pe.shape == (1, 6, embed_dim) and "pe" in embedding.state_dict()


def test_positional_embedding_refuses_sequences_past_max_len_and_applies_dropout() -> None:
    with pytest.raises(ValueError, match="sequence of 4 steps is longer than max_len=3"):
        PositionalEmbedding(2, 3)(torch.zeros(1, 4, 2))
    embedding = PositionalEmbedding(8, 4, dropout=0.5)
    torch.manual_seed(0)
    out = embedding(torch.ones(64, 4, 8))
    assert (out == 0).any()
    assert torch.equal(embedding.eval()(torch.ones(1, 4, 8)), 1 + embedding.pe)


def test_residual_skip_connection_adds_each_layer_to_its_input() -> None:
    skip = SequentialSkipConnection(2, kind="residual")
    layer = nn.Linear(2, 2)
    set_linear(layer, [[1.0, 0.0], [1.0, 1.0]], [0.0, 1.0])
    assert skip.append(layer) == 2
    # y = x + y0 = (1, 2); y + layer(y) = (1, 2) + (1, 4)
    assert skip(torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 1.0]])).tolist() == [[2.0, 6.0]]


def test_cat_skip_connection_concatenates_and_fans_back_in() -> None:
    skip = SequentialSkipConnection(1, kind="cat")
    layer = nn.Linear(1, 1)
    skip.append(layer)
    fan_in_seed, fan_in_layer = (m for m in skip.modules() if isinstance(m, nn.Linear) and m.in_features == 2)
    set_linear(fan_in_seed, [[1.0, 2.0]], [0.0])
    set_linear(layer, [[3.0]], [1.0])
    set_linear(fan_in_layer, [[1.0, -1.0]], [0.5])
    # y = 1 * x + 2 * y0 = 1 + 4 = 5; layer(y) = 16; out = 5 - 16 + 0.5
    assert skip(torch.tensor([[1.0]]), torch.tensor([[2.0]])).tolist() == [[-10.5]]
    assert skip.in_features == skip.out_features == 1


def test_skip_connection_of_kind_none_chains_the_layers_alone() -> None:
    skip = SequentialSkipConnection(1, kind=None)
    layer = nn.Linear(1, 1)
    set_linear(layer, [[2.0]], [1.0])
    skip.append(layer)
    assert skip(torch.tensor([[100.0]]), torch.tensor([[3.0]])).tolist() == [[7.0]]
    with pytest.raises(ValueError, match=r"no skip connection kind 'add'"):
        SequentialSkipConnection(1, kind="add")


def test_module_subclasses_must_implement_forward() -> None:
    class Incomplete(Module[[torch.Tensor], torch.Tensor]):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()


def test_docstring_examples_run() -> None:
    assert doctest.testmod(rl8lite.nn.modules).failed == 0


def test_rl8s_layer_names_import_from_rl8lite_nn_modules() -> None:
    import rl8lite.nn
    import rl8lite.nn.modules

    rl8_names = ["MLP", "CrossAttention", "Module", "PerceiverIOLayer", "PerceiverLayer",
                 "PointerNetwork", "PositionalEmbedding", "SelfAttention", "SelfAttentionStack",
                 "SequentialSkipConnection", "SquaredReLU", "get_activation"]
    assert all(getattr(rl8lite.nn.modules, name) is getattr(rl8lite.nn, name) for name in rl8_names)
