"""The default model of image observations: the Nature CNN (Mnih et al. 2015, as CleanRL's and
SB3's Atari PPO), its frames stacked through a view requirement when asked."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Composite, KeyPath, Spec, TensorSpec, spec_leaves
from ..views import ViewRequirement
from .base import Model
from .default import DefaultModel, actor_head, mlp, shared_spec, with_log_std

#: The smallest side the three convolutions (8 /4, 4 /2, 3 /1) leave a pixel of.
MIN_SIDE = 36


def image_entries(spec: Spec) -> list[tuple[KeyPath, TensorSpec]]:
    """The uint8 leaves of ``spec`` with more than one dimension (images), sorted by path."""
    return sorted((path, leaf) for path, leaf in spec_leaves(spec) if leaf.dtype == torch.uint8
                  and len(leaf.shape) > 1 and DataKeys.ACTION_MASK not in path)


def image_layout(path: KeyPath, shape: Sequence[int]) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of ``shape``: ``[C, H, W]``, ``[H, W, C]``
    where only the last side is 4 or less, ``[H, W]`` (one channel); else a ``ValueError``."""
    shape = [1, *shape] if len(shape) == 2 else list(shape)
    last = len(shape) == 3 and shape[-1] <= 4 < shape[0]
    c, h, w = (shape[2], shape[0], shape[1]) if last else (shape + [0, 0])[:3]
    if len(shape) != 3 or min(h, w) < MIN_SIDE:
        raise ValueError(f"{'.'.join((DataKeys.OBS, *path))}: a uint8 image of shape {shape} cannot"
                         f" go through the Nature CNN, which takes [C, H, W] or [H, W, C] with H, W"
                         f" >= {MIN_SIDE}; pass model_cls= for other images")
    return c, h, w, last


def nature_convolutions(channels: int) -> nn.Sequential:
    """Conv 32 8x8 /4, conv 64 4x4 /2, conv 64 3x3 /1, each with a ReLU, then flattened."""
    layers: list[nn.Module] = []
    for inputs, outputs, kernel, stride in ((channels, 32, 8, 4), (32, 64, 4, 2), (64, 64, 3, 1)):
        layers += [nn.Conv2d(inputs, outputs, kernel, stride), nn.ReLU(inplace=True)]
        nn.init.orthogonal_(layers[-2].weight, math.sqrt(2))
        nn.init.zeros_(layers[-2].bias)
    return nn.Sequential(*layers, nn.Flatten())


def _convolved(side: int) -> int:
    return ((side - 8) // 4 + 1 - 4) // 2 + 1 - 2  # (s - k) // stride + 1, three times


class NatureCNNModel(Model):
    """The Nature CNN over each uint8 image entry (scaled to ``[0, 1]``), its output and the other
    entries into an MLP of ``hiddens`` (ReLU) shared by the actor and critic heads: the default
    model of an observation with images. With ``frame_stack > 1`` each image is seen with its
    ``frame_stack - 1`` predecessors (zeros before the episode's first), stacked on the channels.

    Examples:
        >>> from rl8lite.specs import Bounded, Categorical
        >>> spec = Bounded(0, 255, shape=[84, 84], dtype=torch.uint8)
        >>> model = NatureCNNModel(spec, Categorical(4, shape=[1]), num_features=4, frame_stack=4)
        >>> window = {"inputs": spec.rand([2, 4]), "padding_mask": torch.zeros(2, 4).bool()}
        >>> [t.shape for t in model(TensorDict(window, batch_size=[2, 4]))]
        [torch.Size([2, 4]), torch.Size([2, 1])]
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, *, num_features: int,
                 gaussian: bool = False, hiddens: Sequence[int] = (512,), frame_stack: int = 1,
                 init_log_std: float = 0.0, obs_groups: dict[str, list[str]] | None = None) -> None:
        super().__init__(observation_spec, action_spec, num_features=num_features,
                         gaussian=gaussian, hiddens=list(hiddens), frame_stack=frame_stack,
                         init_log_std=init_log_std, **({"obs_groups": obs_groups} if obs_groups
                                                       else {}))
        if isinstance(frame_stack, bool) or not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(f"frame_stack must be an int >= 1, received {frame_stack!r}")
        self.obs_groups = obs_groups
        spec = shared_spec(observation_spec, obs_groups, type(self).__name__)
        if not (images := image_entries(spec)):
            raise ValueError("NatureCNNModel needs a uint8 image entry [C, H, W] or [H, W, C]")
        self.image_paths = [path for path, _ in images]
        self.layouts = [image_layout(path, leaf.shape) for path, leaf in images]
        #: The other entries (vectors), flattened beside the convolutions' outputs.
        others = [(path, leaf) for path, leaf in spec_leaves(spec)
                  if path not in self.image_paths and DataKeys.ACTION_MASK not in path]
        self.vector_paths = [path for path, _ in others]
        self.convolutions = nn.ModuleList(nature_convolutions(c * frame_stack)
                                          for c, _, _, _ in self.layouts)
        width = sum(64 * _convolved(h) * _convolved(w) for _, h, w, _ in self.layouts)
        width += sum(max(1, math.prod(leaf.shape)) for _, leaf in others)
        self.trunk = mlp(width, list(hiddens)[:-1], hiddens[-1], "relu", out_gain=math.sqrt(2))
        self.actor, log_std = actor_head(hiddens[-1], (), num_features, gaussian, "relu",
                                         init_log_std)
        self.critic = mlp(hiddens[-1], (), 1, "relu", out_gain=1.0)
        self.log_std = log_std
        composite = isinstance(observation_spec, Composite)
        if frame_stack > 1:
            self.view_requirements = {(DataKeys.OBS, *p) if composite else DataKeys.OBS:
                                      ViewRequirement(shift=frame_stack - 1)
                                      for p in self.image_paths}
        else:
            self.channels_last_inputs = tuple(p for p, (_, leaf), (*_, last) in zip(
                self.image_paths, images, self.layouts) if len(leaf.shape) == 3 and not last)

    def _pixels(self, image: Tensor | TensorDict, channels_last: bool) -> Tensor:
        """``[B, (S,) ...]`` uint8 frames as ``[B, S * C, H, W]`` in ``[0, 1]``, channels-last in
        memory (CPU convolutions' backward runs 1.6x faster so), in autocast's dtype if on."""
        x = image[DataKeys.INPUTS] if isinstance(image, TensorDict) else image.unsqueeze(1)
        x = x.unsqueeze(-1 if channels_last else -3) if x.dim() == 4 else x
        x = x.movedim(-1, 2) if channels_last else x  # [B, S, H, W, C] -> [B, S, C, H, W]
        device = x.device.type
        dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                 else torch.float32)
        return x.flatten(1, 2).to(dtype, memory_format=torch.channels_last).div_(255.0)

    def forward(self, obs: Tensor | TensorDict) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        parts = [conv(self._pixels(obs.get(path) if path else obs, layout[3]))
                 for conv, path, layout in zip(self.convolutions, self.image_paths, self.layouts)]
        parts += [obs.get(path).reshape(len(parts[0]), -1).float() for path in self.vector_paths]
        x = self.trunk(torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]).relu_()
        return with_log_std(self.actor(x), self.log_std), self.critic(x)


def default_model_for(spec: Spec, default: Any) -> Any:
    """:class:`NatureCNNModel` for an observation with images where ``default`` is the
    feedforward default model, else ``default``."""
    return NatureCNNModel if default is DefaultModel and image_entries(spec) else default
