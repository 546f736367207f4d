"""Small tensor specs (no torchrl): the shape, dtype and bounds of one env copy's data. Their
constructors take torchrl's arguments (domain hints ignored), so ``torchrl.data`` ports to them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict

from .data import Device

ShapeLike = int | Sequence[int] | torch.Size
KeyPath = tuple[str, ...]


class SpecError(ValueError):
    """Data does not match its spec; the message names the key and the mismatch."""


def _as_shape(shape: ShapeLike | None) -> torch.Size:
    return torch.Size(() if shape is None else [shape] if isinstance(shape, int) else shape)


class TensorSpec:
    """Base of the leaf specs: a per-copy ``shape``, a ``dtype`` and a ``device``."""

    def __init__(self, shape: ShapeLike | None, device: Device | None, dtype: torch.dtype) -> None:
        self.shape = _as_shape(shape)
        self.device = torch.device(device if device is not None else "cpu")
        self.dtype = dtype

    def _full_shape(self, batch_shape: ShapeLike) -> tuple[int, ...]:
        return (*_as_shape(batch_shape), *self.shape)

    def zero(self, batch_shape: ShapeLike = ()) -> torch.Tensor:
        """Zeros of shape ``batch_shape + shape``."""
        return torch.zeros(self._full_shape(batch_shape), dtype=self.dtype, device=self.device)

    def rand(self, batch_shape: ShapeLike = ()) -> torch.Tensor:
        """A random element of the spec for every index of ``batch_shape``."""
        raise NotImplementedError

    def to(self, device: Device) -> TensorSpec:
        """A copy of this spec (and its tensors) on ``device``."""
        clone = object.__new__(type(self))
        for name, value in self.__dict__.items():
            setattr(clone, name, value.to(device) if isinstance(value, torch.Tensor) else value)
        clone.device = torch.device(device)
        return clone

    def assert_is_in(self, value: Any, *, key: str = "value", check_values: bool = True) -> None:
        """Raise :class:`SpecError` unless ``value`` is a batch of this spec's elements (the bounds
        checked with ``check_values``, a host sync)."""
        if not isinstance(value, torch.Tensor):
            raise SpecError(f"{key}: expected a torch.Tensor, received {type(value).__name__}")
        ndim = len(self.shape)
        if value.ndim < ndim or tuple(value.shape[value.ndim - ndim :]) != tuple(self.shape):
            expected = ", ".join(["...", *map(str, self.shape)])  # batch dims, then the spec's
            raise SpecError(f"{key}: expected shape [{expected}], received {list(value.shape)}")
        if value.dtype != self.dtype:
            raise SpecError(f"{key}: expected dtype {self.dtype}, received {value.dtype}")
        if check_values:
            self._assert_values(value, key)

    def is_in(self, value: Any) -> bool:
        """Whether ``value`` passes :meth:`assert_is_in`."""
        try:
            self.assert_is_in(value)
        except SpecError:
            return False
        return True

    def _assert_values(self, value: torch.Tensor, key: str) -> None:
        """Raise :class:`SpecError` for entries of ``value`` outside the spec's bounds."""

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other) or self.__dict__.keys() != other.__dict__.keys():
            return False
        return all(
            torch.equal(mine, other.__dict__[k].to(mine.device))
            if isinstance(mine, torch.Tensor) else mine == other.__dict__[k]
            for k, mine in self.__dict__.items()
        )

    #: Attributes :func:`repr` shows before the shape.
    _repr_names: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = {k: getattr(self, k) for k in self._repr_names}
        fields = {k: _short(v) if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        fields |= {"shape": list(self.shape), "dtype": self.dtype, "device": self.device}
        return f"{type(self).__name__}({', '.join(f'{k}={v}' for k, v in fields.items())})"


def _short(x: torch.Tensor) -> Any:
    """A bound as a number where every element is the same (an image's 0 and 255), else a list."""
    return x.flatten()[0].item() if x.numel() and bool((x == x.flatten()[0]).all()) else x.tolist()


class Unbounded(TensorSpec):
    """Real-valued (or integer) data with no bounds; ``dtype`` defaults to float32."""

    def __init__(self, shape: ShapeLike | None = None, device: Device | None = None,
                 dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        super().__init__(shape, device, dtype or torch.float32)

    def rand(self, batch_shape: ShapeLike = ()) -> torch.Tensor:
        shape = self._full_shape(batch_shape)
        if self.dtype.is_floating_point:
            return torch.randn(shape, dtype=self.dtype, device=self.device)
        return torch.randint(-100, 100, shape, dtype=self.dtype, device=self.device)


class Bounded(TensorSpec):
    """Data with elementwise bounds ``low <= x <= high`` (numbers or tensors of ``shape``, which
    they give when omitted); ``dtype`` defaults to float32."""

    _repr_names = ("low", "high")

    def __init__(self, low: float | torch.Tensor, high: float | torch.Tensor,
                 shape: ShapeLike | None = None, device: Device | None = None,
                 dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        dtype = dtype or torch.float32
        bounds = [torch.as_tensor(bound, dtype=dtype) for bound in (low, high)]
        if shape is None:
            shape = torch.broadcast_shapes(*(bound.shape for bound in bounds))
        super().__init__(shape, device, dtype)
        self.low, self.high = (bound.expand(self.shape).clone().to(self.device) for bound in bounds)
        if bool((self.low > self.high).any()):
            raise SpecError(f"Bounded: low {low} exceeds high {high}")

    def rand(self, batch_shape: ShapeLike = ()) -> torch.Tensor:
        shape = self._full_shape(batch_shape)
        if self.dtype.is_floating_point:
            u = torch.rand(shape, dtype=self.dtype, device=self.device)
            return self.low + u * (self.high - self.low)
        u = torch.rand(shape, device=self.device)
        span = (self.high - self.low + 1).to(u.dtype)
        return (self.low + (u * span).floor().to(self.dtype)).clamp(max=self.high)

    def _assert_values(self, value: torch.Tensor, key: str) -> None:
        low, high = self.low.to(value.device), self.high.to(value.device)
        outside = (value < low) | (value > high)
        if bool(outside.any()):
            # Name the first offender with its own bounds (they may differ per element).
            index = tuple(int(i) for i in outside.nonzero()[0])
            element = index[len(index) - len(self.shape):]
            raise SpecError(f"{key}: {int(outside.sum())} value(s) outside the bounds, e.g."
                            f" {value[index].item()} at index {list(index)} outside"
                            f" [{low[element].item()}, {high[element].item()}]")


class Categorical(TensorSpec):
    """Integer data in ``{0, ..., n - 1}`` (a discrete action, a mask entry); ``dtype``
    defaults to long, ``shape`` to ``[]`` (rl8 envs usually give ``[1]``)."""

    _repr_names = ("n",)

    def __init__(self, n: int, shape: ShapeLike | None = None, device: Device | None = None,
                 dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        if int(n) < 1:
            raise SpecError(f"Categorical: n must be >= 1, received {n}")
        super().__init__(shape, device, dtype or torch.long)
        self.n = int(n)

    def rand(self, batch_shape: ShapeLike = ()) -> torch.Tensor:
        shape = self._full_shape(batch_shape)
        return torch.randint(0, self.n, shape, dtype=self.dtype, device=self.device)

    def _assert_values(self, value: torch.Tensor, key: str) -> None:
        outside = (value < 0) | (value >= self.n)
        if bool(outside.any()):
            raise SpecError(f"{key}: {int(outside.sum())} value(s) outside {{0, ..., {self.n - 1}}}"
                            f", e.g. {value[outside].flatten()[:3].tolist()}")


class MultiCategorical(Bounded):
    """Integers with entry ``i`` in ``{0, ..., nvec[i] - 1}`` (Gymnasium's ``MultiDiscrete``):
    a :class:`Bounded` integer spec from 0 to ``nvec - 1``, ``nvec`` broadcast to ``shape``."""

    _repr_names = ("nvec",)

    def __init__(self, nvec: int | Sequence[int] | torch.Tensor, shape: ShapeLike | None = None,
                 device: Device | None = None, dtype: torch.dtype | None = None) -> None:
        n = torch.as_tensor(nvec, dtype=torch.long)
        if bool((n < 1).any()):
            raise SpecError(f"MultiCategorical: nvec entries must be >= 1, received {n.tolist()}")
        shape = n.shape if shape is None else shape
        super().__init__(0, n - 1, shape=shape, device=device, dtype=dtype or torch.long)

    @property
    def nvec(self) -> torch.Tensor:
        """Number of categories of each entry (``high + 1``)."""
        return self.high.long() + 1


class Composite(Mapping[str, "Spec"]):
    """A (nested) dict of specs, for dict observations (data: a :class:`TensorDict`); ``shape``
    is every entry's leading per-copy shape; with ``device``, every entry is moved there.

    Examples:
        >>> spec = Composite(obs=Bounded(-1.0, 1.0, shape=[3]), mask=Categorical(2, shape=[5]))
        >>> td = spec.rand([8])
        >>> td["obs"].shape, td["mask"].dtype
        (torch.Size([8, 3]), torch.int64)
        >>> spec.assert_is_in(td)
    """

    def __init__(self, spec_dict: Mapping[str, Spec] | None = None, *,
                 shape: ShapeLike | None = None, device: Device | None = None,
                 **specs: Spec) -> None:
        self.shape = _as_shape(shape)
        self.device = torch.device(device) if device is not None else None
        self._specs: dict[str, Spec] = {
            key: spec.to(self.device) if self.device is not None else spec
            for key, spec in {**(spec_dict or {}), **specs}.items()
        }

    def __getitem__(self, key: str) -> Spec:
        return self._specs[key]

    def __setitem__(self, key: str, spec: Spec) -> None:
        self._specs[key] = spec

    def set(self, key: str, spec: Spec) -> Composite:
        """Set ``key`` to ``spec`` and return ``self``."""
        self[key] = spec
        return self

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def to(self, device: Device) -> Composite:
        return Composite(self._specs, shape=self.shape, device=device)

    def _map(self, method: str, batch_shape: ShapeLike) -> TensorDict:
        batch = _as_shape(batch_shape)
        data = {k: getattr(s, method)(batch) for k, s in self._specs.items()}
        return TensorDict(data, batch_size=batch, device=self.device)

    def zero(self, batch_shape: ShapeLike = ()) -> TensorDict:
        return self._map("zero", batch_shape)

    def rand(self, batch_shape: ShapeLike = ()) -> TensorDict:
        return self._map("rand", batch_shape)

    def assert_is_in(self, value: Any, *, key: str = "value", check_values: bool = True) -> None:
        if not hasattr(value, "keys"):
            raise SpecError(f"{key}: expected a TensorDict with keys {sorted(self._specs)},"
                            f" received {type(value).__name__}")
        present = set(value.keys())
        if missing := [k for k in self._specs if k not in present]:
            raise SpecError(f"{key}: missing key(s) {missing}; received keys {sorted(present)}")
        for name, spec in self._specs.items():
            spec.assert_is_in(value[name], key=f"{key}.{name}", check_values=check_values)

    is_in = TensorSpec.is_in

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Composite) and self._specs == other._specs

    def __repr__(self) -> str:
        return f"Composite({', '.join(f'{k}={v!r}' for k, v in self._specs.items())})"


Spec = TensorSpec | Composite


def spec_leaves(spec: Spec, prefix: KeyPath = ()) -> list[tuple[KeyPath, TensorSpec]]:
    """``(key path, leaf spec)`` of each leaf of ``spec``, depth first (a leaf: ``[((), spec)]``).

    Examples:
        >>> spec = Composite(a=Unbounded(1), b=Composite(c=Unbounded(2)))
        >>> [path for path, _ in spec_leaves(spec)]
        [('a',), ('b', 'c')]
    """
    if not isinstance(spec, Composite):
        return [(prefix, spec)]
    return [leaf for key in spec for leaf in spec_leaves(spec[key], (*prefix, key))]

# torchrl's older names, so rl8 environments port by changing the import only.
UnboundedContinuousTensorSpec = Unbounded
BoundedTensorSpec = Bounded
DiscreteTensorSpec = Categorical
CompositeSpec = Composite

__all__ = [
    "Bounded", "BoundedTensorSpec", "Categorical", "Composite", "CompositeSpec",
    "DiscreteTensorSpec", "MultiCategorical", "Spec", "SpecError", "TensorSpec", "Unbounded",
    "UnboundedContinuousTensorSpec", "spec_leaves",
]
