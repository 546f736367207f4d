"""The default models: separate actor and critic MLPs over the (concatenated) vector
observation, and an LSTM between an encoder MLP and the two heads."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Composite, KeyPath, Spec, TensorSpec, Unbounded, spec_leaves
from .base import Model, RecurrentModel


def _amd_cpu() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("vendor_id") and "AuthenticAMD" in line for line in f)
    except OSError:
        return False


#: torch's float32 CPU tanh kernel is 3.7-3.9x slower than ``2 sigmoid(2x) - 1`` on AMD EPYCs
#: (AVX2 and AVX512, 1 thread), as fast as sigmoid on Intel Xeons: a CPU property, not a timing.
TANH_VIA_SIGMOID = _amd_cpu()


# a tensor operand (a Python number costs a conversion per call), on the CPU whatever the
# default device, and a normal tensor even when rl8lite is imported under inference mode
with torch.inference_mode(False):
    _MINUS_ONE = torch.tensor(-1.0, dtype=torch.float32, device="cpu")


def _tanh_via_sigmoid_(x: Tensor) -> Tensor:
    """``tanh(x) = 2 sigmoid(2x) - 1`` written over ``x`` (``x + x`` and ``2y`` are exact, so
    ``-1 + 2y`` rounds once, as ``2y - 1`` does)."""
    y = x.add_(x).sigmoid_()
    return torch.add(_MINUS_ONE, y, alpha=2, out=y)


class _SigmoidTanh(torch.autograd.Function):
    """:func:`_tanh_via_sigmoid_` with tanh's own backward, ``grad * (1 - y^2)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        y = _tanh_via_sigmoid_(x)
        ctx.mark_dirty(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return torch.ops.aten.tanh_backward(grad, ctx.saved_tensors[0])


class InplaceTanh(nn.Tanh):
    """``tanh`` written over its input (its backward needs only its output, and nothing else
    reads a linear layer's output); float32 on an AMD CPU as ``2 sigmoid(2x) - 1`` (within
    3e-7 of tanh), GPUs and other dtypes with torch's tanh."""

    def forward(self, x: Tensor) -> Tensor:
        if not TANH_VIA_SIGMOID or not x.is_cpu or x.dtype != torch.float32:
            return x.tanh_()
        if torch.compiler.is_compiling():  # torch.compile and torch.export: out of place
            return torch.sigmoid(x + x) * 2.0 - 1.0
        if x.requires_grad and torch.is_grad_enabled():
            return _SigmoidTanh.apply(x)
        return _tanh_via_sigmoid_(x)


_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "tanh": InplaceTanh, "relu": lambda: nn.ReLU(inplace=True), "elu": nn.ELU, "gelu": nn.GELU,
    "silu": nn.SiLU,
}


def _vector_entries(spec: Spec) -> list[tuple[KeyPath, TensorSpec]]:
    """The (key path, spec) leaves a default model concatenates, sorted by path."""
    entries = sorted(((path, leaf) for path, leaf in spec_leaves(spec)
                      if DataKeys.ACTION_MASK not in path), key=lambda entry: entry[0])
    for path, leaf in entries:
        if len(leaf.shape) > 1:
            key = ".".join((DataKeys.OBS, *path))
            raise TypeError(f"The default MLP takes vector observations; {key} has shape"
                            f" {list(leaf.shape)} ({leaf.dtype}). uint8 images [C, H, W] or"
                            " [H, W, C] get the Nature CNN; pass model_cls= for other structured"
                            " observations.")
    return entries


def group_specs(spec: Spec, obs_groups: dict[str, Any] | None) -> tuple[Spec, Spec]:
    """The observation entries the actor and the critic read: ``obs_groups``' groups of a
    composite ``spec`` (``None``: all of it for both); a ``ValueError`` naming a bad group."""
    if obs_groups is None:
        return spec, spec
    if not isinstance(spec, Composite):
        raise TypeError("obs_groups names observation groups, but the observation is one tensor")
    if not isinstance(obs_groups, dict) or sorted(obs_groups) != ["actor", "critic"]:
        raise ValueError(f"obs_groups must be {{'actor': [...], 'critic': [...]}}, received"
                         f" {obs_groups!r}")
    specs = []
    for role in ("actor", "critic"):
        groups = obs_groups[role]
        if isinstance(groups, str) or not groups or any(g not in spec for g in groups):
            raise ValueError(f"obs_groups[{role!r}]={groups!r}: expected a non-empty list of the"
                             f" observation's groups {sorted(spec)}")
        specs.append(Composite({group: spec[group] for group in groups}))
    return specs[0], specs[1]


def shared_spec(spec: Spec, obs_groups: dict[str, Any] | None, model_name: str) -> Spec:
    """The entries a model whose actor and critic share layers reads (one group list for both)."""
    actor, critic = group_specs(spec, obs_groups)
    if actor is not critic and list(actor) != list(critic):
        raise ValueError(f"{model_name}'s actor and critic share layers, so they read the same"
                         f" observation groups, but obs_groups is {obs_groups!r}: pass model_cls="
                         " for a critic that reads privileged observations")
    return actor


def flat_obs_size(spec: Spec) -> int:
    """Width of the vector :func:`flatten_obs` makes from one observation."""
    return sum(max(1, math.prod(s.shape)) for _, s in _vector_entries(spec))


def flatten_obs(obs: Tensor | TensorDict, spec: Spec) -> Tensor:
    """The vector entries of a (composite) observation concatenated into ``[B, D]`` floats."""
    if not isinstance(spec, Composite):
        if obs.dim() != 2:
            obs = obs.reshape(obs.shape[0], -1)
        return obs if obs.dtype == torch.float32 else obs.float()
    parts = [obs.get(path) for path, _ in _vector_entries(spec)]
    return torch.cat([p.reshape(p.shape[0], -1).float() for p in parts], dim=-1)


class Linear(nn.Linear):
    """``nn.Linear`` that multiplies by a contiguous copy of ``W^T`` where it widens (``in <
    out``) on a CPU, so the weight gradient is ``x^T g``: MKL computes the narrow ``g^T x``
    5-8x below its usual rate. Same parameters, same math."""

    def forward(self, x: Tensor) -> Tensor:
        # grad mode first: exports and collects (no autograd) never test the batch size
        if (torch.is_grad_enabled() and self.weight.requires_grad and x.device.type == "cpu"
                and self.in_features < self.out_features and x.dim() == 2 and x.shape[0] >= 64):
            weight_t = self.weight.t().contiguous()
            return x @ weight_t if self.bias is None else torch.addmm(self.bias, x, weight_t)
        return F.linear(x, self.weight, self.bias)


class HooklessSequential(nn.Sequential):
    """An ``nn.Sequential`` that calls its layers' ``forward`` directly, skipping their hook
    dispatch (a quarter of a small batch's forward time on a CPU); its own hooks still run."""

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        for layer in self:
            x = layer.forward(x)
        return x


def mlp(in_features: int, hiddens: Sequence[int], out_features: int, activation: str,
        out_gain: float) -> HooklessSequential:
    """An MLP with orthogonal init (gain sqrt(2) inside, ``out_gain`` on the head), zero biases."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, received"
                         f" {activation!r}")
    layers: list[nn.Module] = []
    widths = [in_features, *hiddens, out_features]
    for i, (width, out) in enumerate(itertools.pairwise(widths)):
        linear = Linear(width, out)
        nn.init.orthogonal_(linear.weight, out_gain if i == len(hiddens) else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if i < len(hiddens):
            layers.append(_ACTIVATIONS[activation]())
    return HooklessSequential(*layers)


def actor_head(
    in_features: int, hiddens: Sequence[int], num_features: int, gaussian: bool,
    activation: str, init_log_std: float,
) -> tuple[HooklessSequential, nn.Parameter | None]:
    """The actor MLP and, when its features are ``mean ‖ log_std``, a learned log-std."""
    outputs = num_features // 2 if gaussian else num_features
    log_std = nn.Parameter(torch.full((outputs,), float(init_log_std))) if gaussian else None
    return mlp(in_features, hiddens, outputs, activation, out_gain=0.01), log_std


def with_log_std(features: Tensor, log_std: Tensor | None) -> Tensor:
    """``features ‖ log_std`` (the log-std repeated for every row), or ``features``."""
    if log_std is None:
        return features
    return torch.cat([features, log_std.expand_as(features)], dim=-1)


class DefaultModel(Model):
    """Separate actor and critic MLPs of ``hiddens`` over the (concatenated) vector observation;
    with ``gaussian``, features ``mean ‖ log_std``, a learned, state-independent log-std.
    ``activation``: ``"tanh"``, ``"relu"``, ``"elu"``, ``"gelu"`` or ``"silu"``. ``obs_groups``
    (``{"actor": [...], "critic": [...]}``): the groups of a dict observation each MLP reads, so
    that the critic may read privileged observations the actor does not (asymmetric actor-critic).

    Examples:
        >>> from rl8lite.specs import Composite, Unbounded
        >>> spec = Composite(policy=Unbounded(3), privileged=Unbounded(5))
        >>> groups = {"actor": ["policy"], "critic": ["policy", "privileged"]}
        >>> model = DefaultModel(spec, Unbounded(2), num_features=2, obs_groups=groups)
        >>> model.actor[0].in_features, model.critic[0].in_features
        (3, 8)
    """

    separable = True

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, *, num_features: int,
                 gaussian: bool = False, hiddens: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: float = 0.0,
                 obs_groups: dict[str, list[str]] | None = None) -> None:
        super().__init__(observation_spec, action_spec, num_features=num_features,
                         gaussian=gaussian, hiddens=list(hiddens), activation=activation,
                         init_log_std=init_log_std, **({"obs_groups": obs_groups} if obs_groups
                                                       else {}))
        self.obs_groups = obs_groups
        self.actor_spec, self.critic_spec = group_specs(observation_spec, obs_groups)
        self.actor, log_std = actor_head(flat_obs_size(self.actor_spec), hiddens, num_features,
                                         gaussian, activation, init_log_std)
        self.critic = mlp(flat_obs_size(self.critic_spec), hiddens, 1, activation, out_gain=1.0)
        self.log_std = log_std  # registered after the critic: the parameters' order

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A subclass overriding forward may couple actor and critic: separable if it says so.
        if "forward" in vars(cls) and "separable" not in vars(cls):
            cls.separable = False

    def forward(self, obs: Tensor | TensorDict) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        x = flatten_obs(obs, self.actor_spec)
        x_critic = x if self.critic_spec is self.actor_spec else flatten_obs(obs, self.critic_spec)
        return with_log_std(self.actor(x), self.log_std), self.critic(x_critic)

    def forward_features(self, obs: Tensor | TensorDict) -> Tensor:
        return with_log_std(*self.actor_outputs(obs))

    def actor_outputs(self, obs: Tensor | TensorDict) -> tuple[Tensor, nn.Parameter | None]:
        """The actor MLP's output and the learned log-std (``None`` unless ``gaussian``): what
        :meth:`forward_features` concatenates, or a Gaussian distribution takes apart."""
        return self.actor(flatten_obs(obs, self.actor_spec)), self.log_std

    def forward_values(self, obs: Tensor | TensorDict) -> Tensor:
        return self.critic(flatten_obs(obs, self.critic_spec))


class DefaultRecurrentModel(RecurrentModel):
    """Encoder MLP of ``hiddens``, an LSTM cell of the last width, then actor and critic heads;
    state = ``h ‖ c``. Arguments as :class:`DefaultModel`'s (``obs_groups``: one list of groups
    for the actor and the critic, which share the encoder)."""

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, *, num_features: int,
                 gaussian: bool = False, hiddens: Sequence[int] = (64,),
                 activation: str = "tanh", init_log_std: float = 0.0,
                 obs_groups: dict[str, list[str]] | None = None) -> None:
        super().__init__(observation_spec, action_spec, num_features=num_features,
                         gaussian=gaussian, hiddens=list(hiddens), activation=activation,
                         init_log_std=init_log_std, **({"obs_groups": obs_groups} if obs_groups
                                                       else {}))
        self.obs_groups = obs_groups
        self.input_spec = shared_spec(observation_spec, obs_groups, type(self).__name__)
        width = self.hidden_size = hiddens[-1]
        self.state_size = 2 * width
        #: The parts of the flat state ``h ‖ c`` (rl8's names and shapes, one LSTM layer).
        self.state_spec = Composite({
            DataKeys.HIDDEN_STATES: Unbounded([1, width], device=action_spec.device),
            DataKeys.CELL_STATES: Unbounded([1, width], device=action_spec.device),
        })
        self.encoder = mlp(flat_obs_size(self.input_spec), hiddens[:-1], width, activation,
                           out_gain=1.0)
        self.lstm = nn.LSTMCell(width, width)
        self.actor, log_std = actor_head(width, (), num_features, gaussian, activation,
                                         init_log_std)
        self.critic = mlp(width, (), 1, activation, out_gain=1.0)
        self.log_std = log_std  # after the critic: the parameters' order

    def forward(  # type: ignore[override]
        self, obs: Tensor | TensorDict, states: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        x = torch.tanh(self.encoder(flatten_obs(obs, self.input_spec)))
        h, c = self.lstm(x, states.split(self.hidden_size, dim=-1))
        return with_log_std(self.actor(h), self.log_std), self.critic(h), torch.cat([h, c], dim=-1)
