"""rl8lite.views: rl8's view requirements, against explicit per-step loops."""

from __future__ import annotations

import doctest

import pytest
import torch
from tensordict import TensorDict

import rl8lite.views
from rl8lite.data import DataKeys
from rl8lite.views import PaddedRollingWindow, RollingWindow, ViewRequirement


def padded_windows_by_loop(x: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``b * T + t``: steps ``t - size + 1 .. t`` of sequence ``b``, zeros before step 0."""
    rows, masks = [], []
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            steps = [x[b, s] if s >= 0 else torch.zeros_like(x[b, 0]) for s in range(t - size + 1, t + 1)]
            rows.append(torch.stack(steps))
            masks.append(torch.tensor([s < 0 for s in range(t - size + 1, t + 1)]))
    return torch.stack(rows), torch.stack(masks)


def test_rolling_window_apply_all_keeps_whole_windows_only() -> None:
    x = torch.arange(10.0).reshape(2, 5)
    out = RollingWindow.apply_all(x, 3)
    expected = [[b * 5 + s for s in range(t, t + 3)] for b in range(2) for t in range(3)]
    assert out.tolist() == expected
    assert RollingWindow.drop_size(3) == 2


def test_rolling_window_apply_last_of_a_short_sequence_is_all_of_it() -> None:
    x = torch.arange(4.0).reshape(2, 2)
    assert RollingWindow.apply_last(x, 3).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert RollingWindow.apply_last(x, 1).tolist() == [[1.0], [3.0]]


def test_padded_rolling_window_apply_all_matches_a_loop() -> None:
    x = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0))
    out = PaddedRollingWindow.apply_all(x, 3)
    inputs, mask = padded_windows_by_loop(x, 3)
    assert out.batch_size == (12,)
    assert torch.equal(out[DataKeys.INPUTS], inputs)
    assert torch.equal(out[DataKeys.PADDING_MASK], mask)
    assert PaddedRollingWindow.drop_size(3) == 0


def test_view_requirement_windows_a_nested_key_of_a_batch() -> None:
    prices = torch.randn(2, 5, 1, generator=torch.Generator().manual_seed(1))
    batch = TensorDict({"obs": {"prices": prices, "cash": torch.zeros(2, 5)}}, batch_size=[2, 5])
    view = ViewRequirement(shift=2)
    every = view.apply_all(("obs", "prices"), batch)
    inputs, mask = padded_windows_by_loop(prices, 3)
    assert torch.equal(every[DataKeys.INPUTS], inputs) and torch.equal(every[DataKeys.PADDING_MASK], mask)
    last = view.apply_last(("obs", "prices"), batch)
    assert torch.equal(last[DataKeys.INPUTS], prices[:, 2:]) and not last[DataKeys.PADDING_MASK].any()
    assert view.drop_size == 0


def test_view_requirement_on_a_whole_tensordict_windows_every_leaf() -> None:
    obs = TensorDict({"a": torch.arange(6.0).reshape(2, 3), "b": {"c": -torch.arange(6.0).reshape(2, 3)}},
                     batch_size=[2, 3])
    out = ViewRequirement(shift=1).apply_all("obs", TensorDict({"obs": obs}, batch_size=[2, 3]))
    assert out.batch_size == (6,)
    assert out["a", DataKeys.INPUTS].tolist() == [[0, 0], [0, 1], [1, 2], [0, 3], [3, 4], [4, 5]]
    assert out["b", "c", DataKeys.INPUTS][4].tolist() == [-3.0, -4.0]
    assert out["b", "c", DataKeys.PADDING_MASK][3].tolist() == [True, False]


def test_rolling_view_requirement_drops_the_first_steps() -> None:
    batch = TensorDict({"x": torch.arange(8.0).reshape(2, 4)}, batch_size=[2, 4])
    view = ViewRequirement(shift=1, method="rolling_window")
    assert view.drop_size == 1
    assert view.apply_all("x", batch).tolist() == [[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7]]
    assert view.apply_last("x", batch).tolist() == [[2, 3], [6, 7]]


def test_a_zero_shift_is_the_current_step_alone() -> None:
    batch = TensorDict({"x": torch.arange(6.0).reshape(2, 3, 1)}, batch_size=[2, 3])
    view = ViewRequirement()
    assert view.apply_all("x", batch).shape == (6, 1)
    assert view.apply_last("x", batch).tolist() == [[2.0], [5.0]]
    assert view.drop_size == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"shift": -1}, "`shift` must be a non-negative int, got -1"),
    ({"method": "padded"}, r"`method` must be one of \['padded_rolling_window', 'rolling_window'\], got 'padded'"),
])
def test_view_requirement_refuses_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ViewRequirement(**kwargs)


def test_docstring_examples_run() -> None:
    assert doctest.testmod(rl8lite.views).failed == 0
