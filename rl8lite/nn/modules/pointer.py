"""Pointer network: attention that picks an element of an encoded sequence."""

from __future__ import annotations

import torch
from torch import nn

from ..functional import masked_log_softmax
from .module import Module


class PointerNetwork(Module[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]):
    """Additive attention that scores, for each decoder step, every encoder element
    as the next one to point at (Vinyals et al. 2015, arXiv:1506.03134):

        score[b, d, e] = v . tanh(W1 encoder_out[b, e] + W2 decoder_out[b, d])

    then a log-softmax over ``e``, restricted to the elements ``mask`` allows.

    Args:
        embed_dim: Features ``C`` of the encoder and decoder outputs.

    Examples:
        >>> import torch
        >>> pointer = PointerNetwork(8)
        >>> mask = torch.tensor([[[True, True, False]]])
        >>> logp = pointer(torch.randn(1, 1, 8), torch.randn(1, 3, 8), mask)
        >>> logp.shape, round(logp.exp().sum().item(), 4), logp.exp()[0, 0, 2].item()
        (torch.Size([1, 1, 3]), 1.0, 0.0)
    """

    #: ``W1``, applied to the encoder's output.
    W1: nn.Linear
    #: ``W2``, applied to the decoder's output.
    W2: nn.Linear
    #: ``v``, reducing each blended pair to a score.
    VT: nn.Linear

    def __init__(self, embed_dim: int, /) -> None:
        super().__init__()
        self.W1 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W2 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.VT = nn.Linear(embed_dim, 1, bias=False)

    def forward(
        self, decoder_out: torch.Tensor, encoder_out: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-probabilities of pointing at each encoder element.

        Args:
            decoder_out: ``[B, D, C]``.
            encoder_out: ``[B, E, C]``.
            mask: ``[B, D, E]`` valid mask: which encoder elements each decoder step
                may point at; ``None``: all.

        Returns:
            ``[B, D, E]`` log-probabilities (:func:`~rl8lite.nn.masked_log_softmax` over
            ``E``); ``[:, -1]`` is usually the choice of the next element.
        """
        blended = torch.tanh(self.W2(decoder_out).unsqueeze(2) + self.W1(encoder_out).unsqueeze(1))
        return masked_log_softmax(self.VT(blended).squeeze(-1), mask=mask, dim=-1)
