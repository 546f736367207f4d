"""Checkpoints written by rl8lite 0.1.0 (before the package was reorganised) still resume exactly.

``tests/data/checkpoint-0.1.0-*.pt`` name their classes by the old dotted paths
(``rl8lite.algorithm.Algorithm``, ...); ``checkpoint-0.1.0-resumed.pt`` pins the
stats and parameters of one step after resuming each, as 0.1.0 computed them. Two later
numeric changes move them by float rounding only (losses reported in float64; tanh through
sigmoid on CPU), hence the tolerances.
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
        assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-7, nan_ok=True), key
    for key, value in expected["params"].items():
        torch.testing.assert_close(trainer.algorithm.policy.state_dict()[key], value, rtol=1e-5, atol=1e-7, msg=key)
