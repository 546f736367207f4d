"""The layers rl8 models are built from (rl8's ``rl8.nn.modules``). Attention masks are
:class:`torch.nn.MultiheadAttention`'s: ``key_padding_mask`` ``[B, K]`` is ``True`` at padding,
``attention_mask`` ``[Q, K]`` ``True`` (or ``-inf``) where a query may not attend."""

from __future__ import annotations

import copy
import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .functional import check_skip_kind, masked_log_softmax, skip_connection

__all__ = [
    "ACTIVATIONS", "MLP", "CrossAttention", "Module", "PerceiverIOLayer", "PerceiverLayer",
    "PointerNetwork", "PositionalEmbedding", "SelfAttention", "SelfAttentionStack",
    "SequentialSkipConnection", "SquaredReLU", "get_activation",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_Mask = Tensor | None


class Module(nn.Module, Generic[_P, _T], metaclass=ABCMeta):
    """A :class:`torch.nn.Module` whose call signature a type checker knows:
    ``Module[[Tensor], Tensor]`` takes a tensor and returns one."""

    if TYPE_CHECKING:  # at run time, nn.Module's __call__ (hooks)
        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T: ...

    @abstractmethod
    def forward(self, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """The module's computation."""


class SquaredReLU(Module[[Tensor], Tensor]):
    """``relu(x) ** 2`` (So et al. 2021, "Primer", arXiv:2109.08668)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x).square()


#: Activation classes by the names :func:`get_activation` takes.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU, "gelu": nn.GELU, "hard_shrink": nn.Hardshrink, "hard_sigmoid": nn.Hardsigmoid,
    "hard_swish": nn.Hardswish, "hard_tanh": nn.Hardtanh, "identity": nn.Identity,
    "leaky_relu": nn.LeakyReLU, "log_sigmoid": nn.LogSigmoid, "log_softmax": nn.LogSoftmax,
    "relu": nn.ReLU, "relu6": nn.ReLU6, "selu": nn.SELU, "sigmoid": nn.Sigmoid,
    "softmax": nn.Softmax, "squared_relu": SquaredReLU, "swish": nn.SiLU, "tanh": nn.Tanh,
}


def get_activation(name: str, /, **params: Any) -> nn.Module:
    """A new ``ACTIVATIONS[name]`` built with ``params``; a ``ValueError`` for another name."""
    if name not in ACTIVATIONS:
        raise ValueError(f"no activation named {name!r}: choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name](**params)


class MLP(nn.Sequential, Module[[Tensor], Tensor]):
    """``Linear -> [norm] -> activation -> [Dropout] -> ... -> Linear``; ``hiddens`` are the
    output widths of the linear layers, ``norm_layer`` a class built with each hidden width."""

    def __init__(self, input_dim: int, hiddens: Sequence[int], /, *, activation_fn: str = "relu",
                 norm_layer: type[nn.BatchNorm1d | nn.LayerNorm] | None = None, bias: bool = True,
                 dropout: float = 0.0, inplace: bool = False) -> None:
        if not hiddens:
            raise ValueError("an MLP needs at least one layer: hiddens is empty")
        widths = [input_dim, *hiddens]
        layers: list[nn.Module] = []
        for in_features, out_features in pairwise(widths[:-1]):
            layers.append(nn.Linear(in_features, out_features, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(out_features))
            layers.append(get_activation(activation_fn, **({"inplace": True} if inplace else {})))
            if dropout:
                layers.append(nn.Dropout(p=dropout))
        layers.append(nn.Linear(widths[-2], widths[-1], bias=bias))
        super().__init__(*layers)


class SequentialSkipConnection(Module[[Tensor, Tensor], Tensor]):
    """A chain of layers, each joined to its input: ``forward(x, y)`` joins ``x`` to ``y``, then
    sets ``y = join(y, f(y))`` for each appended layer ``f``. ``kind="cat"`` concatenates, then
    maps back to ``embed_dim`` (a linear layer); ``"residual"`` adds; ``None`` keeps ``f(y)``.

    Examples:
        >>> skip = SequentialSkipConnection(4, kind="residual")
        >>> skip.append(torch.nn.Linear(4, 4))
        4
        >>> skip(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    def __init__(self, embed_dim: int, kind: str | None = "cat") -> None:
        super().__init__()
        check_skip_kind(kind)
        self.kind = kind
        self._embed_dim = embed_dim
        # [fan-in of the first join, layer 1, its fan-in, layer 2, its fan-in, ...]
        self._layers = nn.ModuleList([self._fan_in()])

    def _fan_in(self) -> nn.Module:
        size = self._embed_dim
        return nn.Linear(2 * size, size) if self.kind == "cat" else nn.Identity()

    def append(self, module: nn.Module, /) -> int:
        """Add ``module`` (``embed_dim`` features in and out); returns :attr:`out_features`."""
        self._layers.append(module)
        self._layers.append(self._fan_in())
        return self.out_features

    def forward(self, x: Tensor, y: Tensor, /) -> Tensor:
        y = self._layers[0](skip_connection(x, y, kind=self.kind))
        for layer, fan_in in zip(self._layers[1::2], self._layers[2::2]):
            y = fan_in(skip_connection(y, layer(y), kind=self.kind))
        return y

    #: Features in and out: ``embed_dim``.
    in_features = out_features = property(lambda self: self._embed_dim)


class PositionalEmbedding(Module[[Tensor], Tensor]):
    """Adds sinusoidal codes (Vaswani et al. 2017) to ``[B, T <= max_len, E]``, then dropout:
    ``sin(p / 10000^(2i / E))`` at feature ``2i`` of position ``p``, ``cos`` at ``2i + 1``."""

    pe: Tensor  # [1, max_len, embed_dim]

    def __init__(self, embed_dim: int, max_len: int, /, *, dropout: float = 0.0) -> None:
        super().__init__()
        positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        rate = -math.log(10_000.0) / embed_dim
        angles = positions * torch.exp(torch.arange(0, embed_dim, 2, dtype=torch.float32) * rate)
        pe = torch.empty(1, max_len, embed_dim)
        pe[0, :, 0::2] = torch.sin(angles)
        pe[0, :, 1::2] = torch.cos(angles[:, : embed_dim // 2])
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: Tensor, /) -> Tensor:
        if x.shape[1] > (max_len := self.pe.shape[1]):
            raise ValueError(f"sequence of {x.shape[1]} steps is longer than max_len={max_len}")
        return self.dropout(x + self.pe[:, : x.shape[1]])


class _AttentionBlock(nn.Module):
    """``attention(norm(inputs))`` joined to the queries, then ``LayerNorm -> Linear ->
    activation -> Dropout -> Linear`` joined to its input."""

    _norms: tuple[str, ...] = ()  # attribute names of the input layer norms

    def __init__(self, embed_dim: int, /, num_heads: int = 2, hidden_dim: int = 128,
                 activation_fn: str = "relu", attention_dropout: float = 0.0,
                 hidden_dropout: float = 0.0, skip_kind: str | None = "cat") -> None:
        super().__init__()
        for name in self._norms:
            setattr(self, name, nn.LayerNorm(embed_dim))
        self.attention = nn.MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout,
                                               batch_first=True)
        self.skip_connection = SequentialSkipConnection(embed_dim, kind=skip_kind)
        self.skip_connection.append(nn.Sequential(
            nn.LayerNorm(embed_dim), nn.Linear(embed_dim, hidden_dim),
            get_activation(activation_fn), nn.Dropout(p=hidden_dropout),
            nn.Linear(hidden_dim, embed_dim),
        ))

    def _block(self, q: Tensor, normed_q: Tensor, normed_kv: Tensor, key_padding_mask: _Mask,
               attention_mask: _Mask) -> Tensor:
        attended, _ = self.attention(normed_q, normed_kv, normed_kv, need_weights=False,
                                     key_padding_mask=key_padding_mask, attn_mask=attention_mask)
        return self.skip_connection(q, attended)


class CrossAttention(_AttentionBlock, Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """Queries ``[B, Q, E]`` attend to keys/values ``[B, K, E]`` (``num_heads`` must divide
    ``E``), then a feedforward network of ``hidden_dim`` features: ``[B, Q, E]`` out;
    ``skip_kind`` as :class:`SequentialSkipConnection`'s ``kind``."""

    _norms = ("q_norm", "kv_norm")

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        return self._block(q, self.q_norm(q), self.kv_norm(kv), key_padding_mask, attention_mask)


class SelfAttention(_AttentionBlock, Module[[Tensor, _Mask, _Mask], Tensor]):
    """A sequence ``[B, X, E]`` attends to itself, then a feedforward network (a pre-norm
    transformer layer); arguments as :class:`CrossAttention`'s."""

    _norms = ("x_norm",)

    def forward(self, x: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        normed = self.x_norm(x)
        return self._block(x, normed, normed, key_padding_mask, attention_mask)


class SelfAttentionStack(Module[[Tensor, _Mask, _Mask], Tensor]):
    """``module`` applied ``num_layers`` times with the same masks; with ``share_parameters``
    every layer is ``module`` itself, else a copy."""

    def __init__(self, module: SelfAttention, num_layers: int, /, *,
                 share_parameters: bool = False) -> None:
        super().__init__()
        copies = [module if share_parameters else copy.deepcopy(module) for _ in range(num_layers)]
        self.layers = nn.ModuleList(copies)

    def forward(self, x: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return x


class PerceiverLayer(Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """A latent array ``[B, Q, E]`` cross-attends to inputs ``[B, K, E]`` of any length, then
    self-attends ``num_layers`` times (Jaegle et al. 2021, arXiv:2103.03206); ``**block`` are
    :class:`CrossAttention`'s keywords, for every block."""

    def __init__(self, embed_dim: int, /, *, num_layers: int = 2, share_parameters: bool = False,
                 **block: Any) -> None:
        super().__init__()
        self.cross_attention = CrossAttention(embed_dim, **block)
        self.self_attention = SelfAttentionStack(SelfAttention(embed_dim, **block), num_layers,
                                                 share_parameters=share_parameters)

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        return self.self_attention(self.cross_attention(q, kv, key_padding_mask, attention_mask))


class PerceiverIOLayer(Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """A :class:`PerceiverLayer` read out by a learned query of ``output_seq_dim`` elements
    (Jaegle et al. 2021, arXiv:2107.14795): ``[B, output_seq_dim, E]`` out."""

    def __init__(self, embed_dim: int, output_seq_dim: int, /, *, num_layers: int = 2,
                 share_parameters: bool = False, **block: Any) -> None:
        super().__init__()
        self.perceiver_layer = PerceiverLayer(embed_dim, num_layers=num_layers,
                                              share_parameters=share_parameters, **block)
        query = torch.empty(output_seq_dim, embed_dim)
        self.output_query = nn.Parameter(nn.init.xavier_uniform_(query))
        self.decoder = CrossAttention(embed_dim, **block)

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        latent = self.perceiver_layer(q, kv, key_padding_mask, attention_mask)
        return self.decoder(self.output_query.expand(q.shape[0], -1, -1), latent)


class PointerNetwork(Module[[Tensor, Tensor, _Mask], Tensor]):
    """Log-probabilities ``[B, D, E]`` of pointing, at each decoder step, at each encoder
    element the valid ``mask`` allows (Vinyals et al. 2015, arXiv:1506.03134)::

        score[b, d, e] = v . tanh(W1 encoder_out[b, e] + W2 decoder_out[b, d])

    Examples:
        >>> mask = torch.tensor([[[True, True, False]]])
        >>> logp = PointerNetwork(8)(torch.randn(1, 1, 8), torch.randn(1, 3, 8), mask)
        >>> logp.shape, round(logp.exp().sum().item(), 4), logp.exp()[0, 0, 2].item()
        (torch.Size([1, 1, 3]), 1.0, 0.0)
    """

    def __init__(self, embed_dim: int, /) -> None:
        super().__init__()
        self.W1 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W2 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.VT = nn.Linear(embed_dim, 1, bias=False)

    def forward(self, decoder_out: Tensor, encoder_out: Tensor, mask: _Mask = None) -> Tensor:
        blended = torch.tanh(self.W2(decoder_out).unsqueeze(2) + self.W1(encoder_out).unsqueeze(1))
        return masked_log_softmax(self.VT(blended).squeeze(-1), mask=mask, dim=-1)
