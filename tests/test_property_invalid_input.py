"""Property-based: random invalid configs only ever raise the documented exception types."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl8lite import Algorithm, AlgorithmConfig, ConfigError
from rl8lite.env import DiscreteDummyEnv, EnvConfigError

# The documented errors for bad input: ConfigError (a ValueError) names an
# out-of-range field, TypeError an unknown name, EnvConfigError an unknown env
# parameter; an env's own ValueError for a bad parameter value.
DOCUMENTED = (ConfigError, TypeError, EnvConfigError, ValueError)

FIELDS = [f.name for f in dataclasses.fields(AlgorithmConfig)]

# Values of every shape a user might mistype: wrong types, out-of-range numbers, NaN/inf.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-300, max_value=300),  # valid sizes stay cheap to train
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.just(object()),
    st.just(torch.nn.Linear),
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.dictionaries(st.sampled_from(FIELDS + ["not_a_field", "lr"]), junk, min_size=1, max_size=3))
def test_invalid_configs_raise_only_documented_errors(overrides: dict) -> None:
    kwargs = {"num_envs": 4, "horizon": 4, **overrides}
    unknown = sorted({"not_a_field", "lr"} & set(overrides))
    try:
        algo = Algorithm(DiscreteDummyEnv, **kwargs)
    except TypeError as e:
        assert all(repr(name) in str(e) for name in unknown), e  # an unknown name is named
        return
    except DOCUMENTED:
        assert not unknown  # an unknown name is a TypeError, whatever else is wrong
        return
    assert not unknown, f"unknown field(s) {unknown} accepted"
    # whatever was accepted must give a working algorithm
    algo.collect()
    algo.step()


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(field=st.sampled_from(["gamma", "gae_lambda", "clip_param", "vf_coeff", "entropy_coeff",
                              "max_grad_norm", "target_kl_div", "dual_clip_param", "vf_clip_param"]),
       value=st.floats(allow_nan=True, allow_infinity=False))
def test_numeric_fields_are_range_checked_before_anything_is_built(field: str, value: float) -> None:
    low, high, low_open, high_open = RANGES[field]
    valid = not math.isnan(value) and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    config = AlgorithmConfig(num_envs=4, horizon=4, **{field: value})
    if valid:
        config.validate()
    else:
        with pytest.raises(ConfigError, match=field):
            config.validate()


#: The documented range of each field: (low, high, low open, high open).
RANGES = {
    "gamma": (0.0, 1.0, True, False), "gae_lambda": (0.0, 1.0, False, False), "clip_param": (0.0, 1.0, True, True),
    "vf_coeff": (0.0, math.inf, False, True), "entropy_coeff": (0.0, math.inf, False, True),
    "max_grad_norm": (0.0, math.inf, True, False), "target_kl_div": (0.0, math.inf, True, False),
    "dual_clip_param": (1.0, math.inf, True, False), "vf_clip_param": (0.0, math.inf, True, False),
}
