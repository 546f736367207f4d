import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from rl8lite.algorithms.statistics import extrema


def _largest_allocation(fn) -> int:
    """The most CPU bytes any profiled op of ``fn()`` allocated (children included)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((e.cpu_memory_usage for e in prof.events()), default=0)


@pytest.mark.parametrize(
    "view",
    [
        lambda b: b[:, :32, 0],  # rewards: [N, T] out of [N, T + 1, 1]
        lambda b: b[:, 1:, :],  # [N, T, 1]
        lambda b: b[:, :, 0],  # whole time axis, still strided
        lambda b: b,  # contiguous
        lambda b: b[0, :, 0],  # 1-d
    ],
)
def test_extrema_equal_a_whole_tensor_min_and_max(view):
    x = view(torch.randn(64, 33, 1, generator=torch.Generator().manual_seed(0)))
    low, high = extrema(x)
    assert low.shape == high.shape == ()
    assert low == x.min() and high == x.max()


def test_extrema_of_a_strided_view_propagate_nan_and_show_infinities():
    buffer = torch.zeros(8, 5, 1)
    buffer[3, 2, 0] = float("inf")
    buffer[5, 0, 0] = -float("inf")
    low, high = extrema(buffer[:, :4, 0])
    assert low == -float("inf") and high == float("inf")
    buffer[7, 3, 0] = float("nan")
    assert all(v.isnan() for v in extrema(buffer[:, :4, 0]))
    buffer[7, 4, 0] = float("nan")  # outside the view: not seen
    buffer[7, 3, 0] = 0.0
    assert not any(v.isnan() for v in extrema(buffer[:, :4, 0]))


def test_extrema_of_a_strided_view_copy_nothing_as_large_as_it():
    num_envs, horizon = 4096, 32
    rewards = torch.rand(num_envs, horizon + 1, 1)[:, :horizon, 0]
    view_bytes = rewards.numel() * rewards.element_size()
    # A plain whole-tensor min copies the view into a contiguous temporary first.
    assert _largest_allocation(rewards.min) >= view_bytes
    assert _largest_allocation(lambda: extrema(rewards)) <= num_envs * rewards.element_size()
