"""Seeded runs reproduce the pinned results of ``tests/data/golden/`` (see ``tests/golden.py``):
bit for bit on a machine whose kernels have their own pins, within float rounding elsewhere.

Which of the two runs shows in the test ids (``[cartpole-bit-for-bit]``,
``[cartpole-within-rounding]``). ``RL8LITE_EXACT_PINS=1`` makes a machine without its own
pins a failure (for a release check on a pinned kind of machine).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from .golden import SCENARIOS, kernel_fingerprint, pinned_files, run_scenario

#: Tolerances for a machine without its own pins. After four iterations of seeded training
#: the AMD AVX2 and Intel AVX512 pins differ by at most 13% of this tolerance in the stats
#: (losses near 0: ~1.4e-7 absolute) and 6.5% in the parameters and Adam moments; a change of
#: the algorithm's math moves them by orders of magnitude more.
REL_TOL, ABS_TOL = 1e-3, 1e-6


def _pins() -> tuple[Path, bool]:
    """This machine's pinned file (``exact``) or else the first one, and whether it is exact."""
    files = pinned_files()
    assert files, "no pinned results: run python -m tests.golden --write"
    own = [f for f in files if f.stem == kernel_fingerprint()]
    return (own[0], True) if own else (files[0], False)


MODE = "bit-for-bit" if _pins()[1] else "within-rounding"


@pytest.fixture(scope="module")
def pins() -> tuple[dict, bool, str]:
    path, exact = _pins()
    if not exact and os.environ.get("RL8LITE_EXACT_PINS") == "1":
        pytest.fail(f"RL8LITE_EXACT_PINS=1 and no pins for this machine ({kernel_fingerprint()})")
    return torch.load(path, weights_only=True), exact, path.stem


def _same_float(a: float, b: float, exact: bool) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return a == b if exact else math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _same_tensor(have: torch.Tensor, want: torch.Tensor, exact: bool) -> bool:
    if exact or not want.is_floating_point():
        return torch.equal(have, want)
    return have.shape == want.shape and torch.allclose(have, want, rtol=REL_TOL, atol=ABS_TOL)


@pytest.mark.parametrize("name", sorted(SCENARIOS), ids=lambda name: f"{name}-{MODE}")
def test_seeded_run_reproduces_pinned_results(name: str, pins: tuple[dict, bool, str]) -> None:
    golden, exact, pinned_on = pins
    how = "bit for bit" if exact else f"within rtol {REL_TOL}, atol {ABS_TOL}"
    where = f"(pins of {pinned_on}, compared {how}; this machine: {kernel_fingerprint()})"
    expected, got = golden[name], run_scenario(name)
    assert len(got["stats"]) == len(expected["stats"])
    for i, (want, have) in enumerate(zip(expected["stats"], got["stats"])):
        assert sorted(have) == sorted(want), f"stats #{i}: keys differ"
        differing = {k: (want[k], have[k]) for k in want if not _same_float(want[k], have[k], exact)}
        assert not differing, f"stats #{i} differ (pinned, now) {where}: {differing}"
    for part in ("params", "optimizer"):
        assert sorted(got[part]) == sorted(expected[part])
        for key, want in expected[part].items():
            have = got[part][key]
            diff = (have.double() - want.double()).abs().max().item() if have.shape == want.shape else None
            assert _same_tensor(have, want, exact), (
                f"{part} {key!r} differs (max abs difference {diff}) {where}"
            )
    assert torch.equal(got["rng"], expected["rng"]), f"the random stream moved differently {where}"


def test_the_tolerance_still_catches_a_changed_result(pins: tuple[dict, bool, str]) -> None:
    """A tenth of a percent in a loss or one learning-rate step's worth of a parameter is
    outside the tolerance: the comparison without own pins is not vacuous."""
    golden, _, _ = pins
    loss = golden["cartpole"]["stats"][1]["losses/vf"]
    assert not _same_float(loss * 1.002, loss, exact=False)
    weight = golden["cartpole"]["params"]["model.actor.0.weight"]
    assert not _same_tensor(weight + 1e-3, weight, exact=False)
    assert _same_tensor(weight * (1 + 1e-5), weight, exact=False)
