"""The model protocol: ``forward(obs) -> (features, values)`` in one pass, and the
view requirements (windows of past observations) a model may declare.

rl8's model interface (``forward(batch) -> features TensorDict`` and ``value_function()``)
is accepted too: :mod:`rl8lite.models.rl8_style` adapts such models to this protocol.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..specs import Spec
from ..views import ViewKind, ViewRequirement


class Model(nn.Module):
    """Base class of policy models.

    A model returns, in one forward pass, the features its action distribution
    is built from (``[B, num_inputs]``) and the value estimates (``[B, 1]``).
    Unlike rl8's models it keeps no state between calls: there is no separate
    ``value_function()`` reading a cached forward pass.

    A model may ask for windows of past observations by adding to
    :attr:`view_requirements` (rl8's view requirements, keyed by batch key: ``"obs"``
    or a nested ``("obs", key, ...)``). With ``ViewRequirement(shift=k)``, ``k > 0``, the
    entry it names reaches ``forward`` as a TensorDict with the ``k + 1`` steps ending at
    the current one under ``DataKeys.INPUTS`` (``[B, k + 1, ...]``) and which of them are
    padding under ``DataKeys.PADDING_MASK`` (``[B, k + 1]``, ``True`` at padding). Steps
    before the current episode's first are padding: zeros in the inputs, never the
    previous episode. Windows continue across collects while the env is not reset.

    Args:
        observation_spec: The env's observation spec.
        action_spec: The env's action spec.
        **config: Model-specific options, kept in :attr:`config`.

    Examples:
        A model that sees the last 4 observations of a vector env:

        >>> import torch
        >>> from rl8lite.data import DataKeys
        >>> from rl8lite.specs import Categorical, Unbounded
        >>> from rl8lite.views import ViewRequirement
        >>> class Stacked(Model):
        ...     def __init__(self, observation_spec, action_spec, /):
        ...         super().__init__(observation_spec, action_spec)
        ...         self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=3)
        ...         self.net = torch.nn.Linear(4 * observation_spec.shape[0], action_spec.n + 1)
        ...     def forward(self, obs):
        ...         out = self.net(obs[DataKeys.INPUTS].flatten(1))  # [B, 4, D] -> [B, 4 * D]
        ...         return out[:, :-1], out[:, -1:]
        >>> model = Stacked(Unbounded(2), Categorical(3, shape=[1]))
        >>> batch = TensorDict({"obs": torch.randn(5, 7, 2)}, batch_size=[5, 7])  # 5 copies, 7 steps
        >>> window = model.apply_view_requirements(batch)[DataKeys.OBS]
        >>> window[DataKeys.INPUTS].shape, window[DataKeys.PADDING_MASK].shape
        (torch.Size([5, 4, 2]), torch.Size([5, 4]))
        >>> [t.shape for t in model(window)]
        [torch.Size([5, 3]), torch.Size([5, 1])]
    """

    #: Windows of past steps the model sees, per batch key (``"obs"`` or ``("obs", key, ...)``;
    #: a later, more specific entry overrides an earlier one for the entries it names). The
    #: default, rl8's, is the current observation alone.
    view_requirements: dict[str | tuple[str, ...], ViewRequirement]

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, **config: Any) -> None:
        super().__init__()
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.config = config
        self.view_requirements = {DataKeys.OBS: ViewRequirement(shift=0)}

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (the CPU for a model without any)."""
        return next(self.parameters(), torch.empty(0)).device

    def apply_view_requirements(self, batch: TensorDict, /, *, kind: ViewKind = "last") -> TensorDict:
        """The model's input for a batch of sequences ``[B, T, ...]`` (rl8's method).

        Args:
            batch: TensorDict ``[B, T]`` (``B`` sequences, e.g. env copies, of ``T`` steps)
                holding at least the keys :attr:`view_requirements` names.
            kind: ``"last"``: the input at each sequence's last step, batch ``[B]``;
                ``"all"``: the input at every step, batch ``[B * T]`` (row ``b * T + t``).

        Returns:
            A TensorDict with each view requirement's item (see
            :meth:`~rl8lite.views.ViewRequirement.apply_last`/``apply_all``). Each sequence
            is taken as one episode that starts at its first step; the algorithm builds
            its windows from its buffer, episode-aware, instead.
        """
        out: dict[Any, Any] = {}
        for key, requirement in self.view_requirements.items():
            apply = requirement.apply_all if kind == "all" else requirement.apply_last
            out[key] = apply(key, batch)
        sizes = {key: item.shape[0] for key, item in out.items()}
        if len(set(sizes.values())) > 1:
            raise RuntimeError(f"{type(self).__name__}'s view requirements give different batch sizes {sizes}")
        result = TensorDict({}, batch_size=[next(iter(sizes.values()))], device=batch.device)
        for key, item in out.items():
            result.set(key, item)
        return result

    @property
    def drop_size(self) -> int:
        """Steps at the start of each sequence that ``apply_view_requirements(kind="all")``
        makes no input for (rl8's; 0 unless a requirement uses ``"rolling_window"``)."""
        self.validate_view_requirements()
        return next(iter(r.drop_size for r in self.view_requirements.values()), 0)

    def validate_view_requirements(self) -> None:
        """Refuse view requirements that drop different numbers of steps (ambiguous batches).

        Raises:
            RuntimeError: Two requirements have different :attr:`ViewRequirement.drop_size`.
        """
        drop_sizes = {key: r.drop_size for key, r in self.view_requirements.items()}
        if len(set(drop_sizes.values())) > 1:
            raise RuntimeError(
                f"{type(self).__name__}'s view requirements drop different numbers of steps"
                f" {drop_sizes}, an ambiguous batch size: use method='padded_rolling_window'"
            )

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor | TensorDict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    #: Whether :meth:`forward_features` and :meth:`forward_values` each compute one of
    #: ``forward``'s outputs without the other (no shared layers). The collect then samples
    #: actions from the features alone and computes the values of all its observations in
    #: one batched pass after the rollout, instead of ``horizon`` small ones. A model with
    #: separate actor and critic networks sets it and overrides both methods. Ignored
    #: while the model has forward hooks (they would not run during the collect).
    separable: bool = False

    def forward_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The features alone (``forward(obs)[0]`` unless a separable model overrides it)."""
        return self(obs)[0]

    def forward_values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The values alone (``forward(obs)[1]`` unless a separable model overrides it)."""
        return self(obs)[1]


class ModelFactory(Protocol):
    """Anything that builds a :class:`Model` from the env's specs and a config."""

    def __call__(
        self, observation_spec: Spec, action_spec: Spec, /, **config: Any
    ) -> Model: ...
