"""rl8lite.views: strided windows, their padding masks and rl8's view requirements, against
explicit per-step loops."""

from __future__ import annotations

import doctest

import pytest
import torch
from tensordict import TensorDict

import rl8lite.views
from rl8lite.data import DataKeys
from rl8lite.views import (
    PaddedRollingWindow,
    RollingWindow,
    ViewRequirement,
    episode_steps,
    pad_last_sequence,
    pad_whole_sequence,
    rolling_window,
    window_at_last_step,
    window_padding_mask,
    windows_at_every_step,
    zero_padding,
)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def reference_window(x: torch.Tensor, b: int, end: int, size: int, first: int) -> tuple[torch.Tensor, list[bool]]:
    """Steps ``end - size + 1 .. end`` of sequence ``b`` one by one; those before ``first``
    (the episode's first step, or 0) are padding and zeros."""
    steps, padding = [], []
    for s in range(end - size + 1, end + 1):
        pad = s < max(first, 0)
        steps.append(torch.zeros_like(x[b, 0]) if pad else x[b, s])
        padding.append(pad)
    return torch.stack(steps), padding


def test_rolling_window_holds_the_slices_of_each_window_and_is_a_view() -> None:
    x = torch.arange(2 * 6 * 3, dtype=torch.float32).reshape(2, 6, 3)
    windows = rolling_window(x, 4, step=2)
    assert windows.shape == (2, 2, 4, 3)
    for b in range(2):
        for i in range(2):
            assert torch.equal(windows[b, i], x[b, 2 * i: 2 * i + 4])
    assert same_storage(windows, x)
    x[1, 5, 0] = -1.0  # a write into x shows in the view
    assert windows[1, 1, 3, 0] == -1.0


@pytest.mark.parametrize("size, step, match", [
    (0, 1, "size must be an int >= 1"), (5, 1, "does not fit"), (2, 0, "step must be an int >= 1"),
])
def test_rolling_window_refuses_windows_that_cannot_be_taken(size: int, step: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rolling_window(torch.zeros(2, 4), size, step=step)


def test_a_sequence_needs_a_time_dimension() -> None:
    with pytest.raises(ValueError, match=r"\[B, T, ...\].*got shape \[3\]"):
        pad_last_sequence(torch.zeros(3), 2)


def test_pad_last_sequence_takes_the_last_steps_as_a_view_or_pads_in_front() -> None:
    x = torch.tensor([[[1.0], [2.0], [3.0]]])
    long = pad_last_sequence(x, 2)
    assert long[DataKeys.INPUTS].tolist() == [[[2.0], [3.0]]]
    assert long[DataKeys.PADDING_MASK].tolist() == [[False, False]]
    assert same_storage(long[DataKeys.INPUTS], x)
    short = pad_last_sequence(x, 5)
    assert short.batch_size == (1, 5)
    assert short[DataKeys.INPUTS].tolist() == [[[0.0], [0.0], [1.0], [2.0], [3.0]]]
    assert short[DataKeys.PADDING_MASK].tolist() == [[True, True, False, False, False]]


def test_pad_whole_sequence_puts_size_minus_one_zero_steps_in_front() -> None:
    out = pad_whole_sequence(torch.tensor([[5.0, 6.0], [7.0, 8.0]]), 3)
    assert out.batch_size == (2, 4)
    assert out[DataKeys.INPUTS].tolist() == [[0.0, 0.0, 5.0, 6.0], [0.0, 0.0, 7.0, 8.0]]
    assert out[DataKeys.PADDING_MASK].tolist() == [[True, True, False, False]] * 2


def test_episode_steps_count_from_each_episode_start_and_carry_the_initial_step() -> None:
    ends = torch.tensor([[False, True, False, True], [False, False, False, False], [True, True, False, False]])
    initial = torch.tensor([3, 7, 2])
    expected = torch.empty(3, 5, dtype=torch.long)
    for b in range(3):
        step = int(initial[b])
        for t in range(5):
            if t > 0:
                step = 0 if ends[b, t - 1] else step + 1
            expected[b, t] = step
    assert torch.equal(episode_steps(ends, initial=initial), expected)
    assert episode_steps(ends)[1].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("history", [0, 1, 3, 5])
def test_windows_at_every_step_match_a_loop_and_never_mix_episodes(history: int) -> None:
    size, batch, num_windows = 4, 3, 6
    generator = torch.Generator().manual_seed(history)
    x = torch.randn(batch, history + num_windows, 2, generator=generator)
    ends = torch.rand(batch, history + num_windows - 1, generator=generator) < 0.3
    steps = episode_steps(ends, initial=torch.tensor([0, 2, 9]))[:, history:]
    windows = windows_at_every_step(x, size, history=history, episode_steps=steps)
    assert windows.batch_size == (batch, num_windows)
    assert windows[DataKeys.INPUTS].shape == (batch, num_windows, size, 2)
    zeroed = zero_padding(windows)
    for b in range(batch):
        for t in range(num_windows):
            end = history + t
            expected, padding = reference_window(x, b, end, size, first=end - int(steps[b, t]))
            assert windows[DataKeys.PADDING_MASK][b, t].tolist() == padding
            assert torch.equal(zeroed[DataKeys.INPUTS][b, t], expected)
    assert same_storage(windows[DataKeys.INPUTS], x) == (history >= size - 1)


def test_windows_at_every_step_default_to_one_episode_from_the_first_step() -> None:
    x = torch.arange(5.0).reshape(1, 5)
    windows = windows_at_every_step(x, 3, history=1)
    for t in range(4):
        expected, padding = reference_window(x, 0, 1 + t, 3, first=0)
        assert torch.equal(windows[DataKeys.INPUTS][0, t], expected)
        assert windows[DataKeys.PADDING_MASK][0, t].tolist() == padding


def test_masked_steps_of_a_previous_episode_stay_in_the_view_until_zeroed() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0]])
    windows = windows_at_every_step(x, 2, history=1, episode_steps=torch.tensor([[0, 0]]))
    assert windows[DataKeys.INPUTS][0].tolist() == [[1.0, 2.0], [2.0, 3.0]]
    assert zero_padding(windows)[DataKeys.INPUTS][0].tolist() == [[0.0, 2.0], [0.0, 3.0]]
    assert windows[DataKeys.INPUTS][0].tolist() == [[1.0, 2.0], [2.0, 3.0]]  # zero_padding copies


def test_a_minibatch_of_windows_gathered_from_the_view_with_its_own_mask() -> None:
    size, history = 3, 2
    x = torch.randn(4, history + 6, 1, generator=torch.Generator().manual_seed(7))
    ends = torch.rand(4, history + 5, generator=torch.Generator().manual_seed(8)) < 0.3
    steps = episode_steps(ends)[:, history:]
    copies, times = torch.tensor([0, 3, 3, 1]), torch.tensor([5, 0, 2, 4])
    inputs = rolling_window(x, size)[copies, times]
    mask = window_padding_mask(steps[copies, times], size)
    for row, (b, t) in enumerate(zip(copies.tolist(), times.tolist())):
        end = history + t
        expected, padding = reference_window(x, b, end, size, first=end - int(steps[b, t]))
        assert mask[row].tolist() == padding
        assert torch.equal(inputs[row].masked_fill(mask[row].unsqueeze(-1), 0), expected)


def test_windows_of_a_nested_tensordict_keep_its_keys_and_share_one_mask() -> None:
    obs = TensorDict({"a": torch.arange(8.0).reshape(2, 4), "b": {"c": torch.arange(16.0).reshape(2, 4, 2)}},
                     batch_size=[2, 4])
    windows = windows_at_every_step(obs, 2, history=1)
    assert windows.batch_size == (2, 3)
    assert windows["a", DataKeys.INPUTS][1, 0].tolist() == [4.0, 5.0]
    assert windows["b", "c", DataKeys.INPUTS][1, 2].tolist() == [[12.0, 13.0], [14.0, 15.0]]
    assert windows["b", "c", DataKeys.PADDING_MASK] is windows["a", DataKeys.PADDING_MASK]
    gathered = zero_padding(windows[torch.tensor([0, 1]), torch.tensor([2, 0])])
    assert gathered["b", "c", DataKeys.INPUTS].shape == (2, 2, 2)


@pytest.mark.parametrize("length", [1, 2, 5])
def test_window_at_last_step_matches_a_loop(length: int) -> None:
    size = 3
    x = torch.randn(4, length, 2, generator=torch.Generator().manual_seed(length))
    episode_step = torch.tensor([0, 1, 2, 40])
    window = window_at_last_step(x, size, episode_step=episode_step)
    assert window.batch_size == (4, size)
    for b in range(4):
        end = length - 1
        expected, padding = reference_window(x, b, end, size, first=end - int(episode_step[b]))
        assert torch.equal(window[DataKeys.INPUTS][b], expected)
        assert window[DataKeys.PADDING_MASK][b].tolist() == padding


def test_window_at_last_step_of_a_tensordict_pads_each_leaf() -> None:
    obs = TensorDict({"a": torch.ones(2, 1, 3)}, batch_size=[2, 1])
    window = window_at_last_step(obs, 2)
    assert window["a", DataKeys.INPUTS].tolist() == [[[0.0] * 3, [1.0] * 3]] * 2
    assert window["a", DataKeys.PADDING_MASK].tolist() == [[True, False]] * 2


@pytest.mark.parametrize("kwargs, match", [
    ({"history": 4}, r"history must be in \[0, 3\]"),
    ({"episode_steps": torch.zeros(2, 3)}, r"episode_steps must be \[B, T\] = \[2, 4\]"),
])
def test_windows_at_every_step_refuses_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        windows_at_every_step(torch.zeros(2, 4), 2, **kwargs)


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
