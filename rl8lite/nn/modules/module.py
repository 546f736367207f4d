"""A typed :class:`torch.nn.Module` (rl8's ``rl8.nn.Module``)."""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import TYPE_CHECKING, Generic, ParamSpec, TypeVar

from torch import nn

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Module(nn.Module, Generic[_P, _T], metaclass=ABCMeta):
    """An :class:`torch.nn.Module` whose call signature a type checker knows.

    ``Module[[torch.Tensor, torch.Tensor], torch.Tensor]`` is a module called with two
    tensors that returns one; subclasses implement :meth:`forward`. Only the type
    checker sees the typed ``__call__``: at run time calls go straight to
    :class:`torch.nn.Module`'s.

    Examples:
        >>> import torch
        >>> class Double(Module[[torch.Tensor], torch.Tensor]):
        ...     def forward(self, x: torch.Tensor) -> torch.Tensor:
        ...         return 2 * x
        >>> Double()(torch.ones(2))
        tensor([2., 2.])
    """

    if TYPE_CHECKING:

        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T: ...

    @abstractmethod
    def forward(self, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """The module's computation."""
