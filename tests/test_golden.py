"""Seeded runs reproduce ``tests/data/golden.pt`` bit for bit (see ``tests/golden.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from .golden import GOLDEN_FILE, SCENARIOS, run_scenario


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(GOLDEN_FILE, weights_only=True)


def _same_float(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_seeded_run_reproduces_pinned_results_exactly(name: str, golden: dict) -> None:
    expected, got = golden[name], run_scenario(name)
    assert len(got["stats"]) == len(expected["stats"])
    for i, (want, have) in enumerate(zip(expected["stats"], got["stats"])):
        assert sorted(have) == sorted(want), f"stats #{i}: keys differ"
        differing = {k: (want[k], have[k]) for k in want if not _same_float(want[k], have[k])}
        assert not differing, f"stats #{i} differ (pinned, now): {differing}"
    for part in ("params", "optimizer"):
        assert sorted(got[part]) == sorted(expected[part])
        for key, want in expected[part].items():
            have = got[part][key]
            diff = (have.double() - want.double()).abs().max().item() if have.shape == want.shape else None
            assert torch.equal(have, want), f"{part} {key!r} differs (max abs difference {diff})"
    assert torch.equal(got["rng"], expected["rng"]), "the random stream moved differently"
