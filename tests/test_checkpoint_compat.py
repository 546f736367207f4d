"""Checkpoints written by rl8lite 0.1.0 (before the package was reorganised) still resume exactly.

``tests/data/checkpoint-0.1.0-*.pt`` name their classes by the old dotted paths
(``rl8lite.algorithm.Algorithm``, ...); ``checkpoint-0.1.0-resumed.pt`` pins the
stats and parameters of one step after resuming each, as 0.1.0 computed them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rl8lite import Trainer

from .helpers import MemoryTracker

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["feedforward", "recurrent"])
def test_a_checkpoint_of_the_old_layout_resumes_exactly(name: str) -> None:
    expected = torch.load(DATA / "checkpoint-0.1.0-resumed.pt", weights_only=True)[name]
    trainer = Trainer.from_checkpoint(DATA / f"checkpoint-0.1.0-{name}.pt", tracker=MemoryTracker(), progress=False)
    stats = trainer.step()
    for key, value in expected["stats"].items():
        assert stats[key] == value or (value != value and stats[key] != stats[key]), key
    for key, value in expected["params"].items():
        assert torch.equal(trainer.algorithm.policy.state_dict()[key], value), key
