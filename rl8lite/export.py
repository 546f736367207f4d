"""The trained policy as a plain, deterministic torch module (what an MLflow model serves)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from .policy import Policy
from .specs import Composite, Spec


class DeterministicActor(nn.Module):
    """Observations in, the policy's most likely (mean) actions out; CPU, eval mode."""

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = copy.deepcopy(policy).cpu().eval()
        # The spec is no module buffer: move its bound tensors too, or a CUDA-trained
        # policy would export cuda constants.
        self.policy.action_spec = policy.action_spec.to("cpu")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.policy.act(obs, deterministic=True)[0]


def example_observation(spec: Spec, batch_size: int = 2) -> np.ndarray:
    """A zero observation batch for ``spec``, as numpy (MLflow's ``input_example``)."""
    if isinstance(spec, Composite):
        raise NotImplementedError(
            "Saving a policy over dict (Composite) observations as an MLflow model is not"
            " supported yet; save policy.state_dict() with torch.save instead."
        )
    return spec.to("cpu").zero([batch_size]).numpy()
