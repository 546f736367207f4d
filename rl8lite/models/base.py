"""The model protocols: ``forward(obs) -> (features, values)`` in one pass (recurrent: one time
step, the caller carrying the state), and the windows of past observations a model may declare."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Spec
from ..views import ViewKind, ViewRequirement


class Model(nn.Module):
    """Base class of policy models: one stateless forward pass gives the distribution's
    features ``[B, num_inputs]`` and the values ``[B, 1]``; ``**config`` is kept in
    :attr:`config`. With ``view_requirements[key] = ViewRequirement(shift=k)``, ``key`` reaches
    ``forward`` as a window of the ``k + 1`` steps ending at the current one (``INPUTS``,
    ``[B, k + 1, ...]``, and ``PADDING_MASK``: steps before the episode's first, zeroed).

    Examples:
        >>> from rl8lite.specs import Categorical, Unbounded
        >>> class Stacked(Model):  # sees the last 4 observations
        ...     def __init__(self, observation_spec, action_spec, /):
        ...         super().__init__(observation_spec, action_spec)
        ...         self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=3)
        ...         self.net = torch.nn.Linear(4 * observation_spec.shape[0], action_spec.n + 1)
        ...     def forward(self, obs):
        ...         out = self.net(obs[DataKeys.INPUTS].flatten(1))
        ...         return out[:, :-1], out[:, -1:]
        >>> model = Stacked(Unbounded(2), Categorical(3, shape=[1]))
        >>> batch = TensorDict({"obs": torch.randn(5, 7, 2)}, batch_size=[5, 7])
        >>> window = model.apply_view_requirements(batch)[DataKeys.OBS]
        >>> [t.shape for t in model(window)]
        [torch.Size([5, 3]), torch.Size([5, 1])]
    """

    #: Windows of past steps the model sees, per batch key (``"obs"`` or ``("obs", key, ...)``;
    #: a later, more specific entry overrides an earlier one); default: the current step.
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

    def apply_view_requirements(self, batch: TensorDict, /, *,
                                kind: ViewKind = "last") -> TensorDict:
        """The model's input for a batch of sequences ``[B, T]`` (rl8's method), each one
        episode: at each sequence's last step (``kind="last"``, batch ``[B]``) or at every
        step (``"all"``, batch ``[B * T]``, row ``b * T + t``)."""
        if kind == "all":  # different drop sizes would give different batch sizes
            self.validate_view_requirements()
        out = {key: (view.apply_all if kind == "all" else view.apply_last)(key, batch)
               for key, view in self.view_requirements.items()}
        result = TensorDict({}, batch_size=[next(iter(out.values())).shape[0]], device=batch.device)
        for key, item in out.items():  # in order: a later entry overrides an earlier nested one
            result.set(key, item)
        return result

    @property
    def drop_size(self) -> int:
        """Steps at the start of each sequence that ``apply_view_requirements(kind="all")``
        makes no input for (rl8's)."""
        self.validate_view_requirements()
        return next((r.drop_size for r in self.view_requirements.values()), 0)

    def validate_view_requirements(self) -> None:
        """Raise ``RuntimeError`` if view requirements drop different numbers of steps."""
        drop_sizes = {key: r.drop_size for key, r in self.view_requirements.items()}
        if len(set(drop_sizes.values())) > 1:
            raise RuntimeError(f"{type(self).__name__}'s view requirements drop different numbers"
                               f" of steps {drop_sizes}, an ambiguous batch size: use"
                               " method='padded_rolling_window'")

    def forward(self, obs: Tensor | TensorDict) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        raise NotImplementedError

    #: The observation groups (top-level keys) the actor and the critic read, ``{"actor": [...],
    #: "critic": [...]}`` (``None``: both read all); an exported policy takes the actor's only.
    obs_groups: dict[str, list[str]] | None = None

    #: Paths of the ``[C, H, W]`` observation entries the model reads fastest in channels-last
    #: memory (convolutions); the buffer stores them so.
    channels_last_inputs: tuple[tuple[str, ...], ...] = ()

    #: Whether :meth:`forward_features` and :meth:`forward_values` share no layers: the collect
    #: then computes all values in one pass after the rollout. Ignored with forward hooks.
    separable: bool = False

    def forward_features(self, obs: Tensor | TensorDict) -> Tensor:
        """The features alone (``forward(obs)[0]`` unless a separable model overrides it)."""
        return self(obs)[0]

    def forward_values(self, obs: Tensor | TensorDict) -> Tensor:
        """The values alone (``forward(obs)[1]`` unless a separable model overrides it)."""
        return self(obs)[1]


class RecurrentModel(Model):
    """A model of one time step, ``forward(obs, states) -> (features, values, next_states)``
    with states ``[B, state_size]``; the algorithm carries them through the rollout, zeroes
    them where an episode ends, and unrolls sequences for truncated BPTT."""

    state_size: int

    def init_states(self, batch_size: int, device: torch.device) -> Tensor:
        """Initial (zero) states ``[batch_size, state_size]``."""
        return torch.zeros(batch_size, self.state_size, device=device)

    def forward(  # type: ignore[override]
        self, obs: Tensor | TensorDict, states: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError


class ModelFactory(Protocol):
    """Anything that builds a :class:`Model` from the env's specs and a config."""

    def __call__(self, observation_spec: Spec, action_spec: Spec, /, **config: Any) -> Model: ...
