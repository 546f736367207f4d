"""Image observations: the Nature CNN as the default model, uint8 in the buffer (stored
channels-last for the convolutions), frames stacked through a view requirement, exports."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from rl8lite import Algorithm, RecurrentAlgorithm
from rl8lite.algorithms.config import ConfigError
from rl8lite.models import NatureCNNModel
from rl8lite.models.cnn import image_layout
from rl8lite.specs import Bounded, Categorical, Composite, Unbounded

from .helpers import DotImage, frame_stacked

SIDE = DotImage.SIDE


def dots(layout: str) -> type[DotImage]:
    return type(f"Dots_{layout}", (DotImage,), {"__init__": lambda self, n, h=None, **kw: DotImage.__init__(
        self, n, h, config={"layout": layout}, **{k: v for k, v in kw.items() if k != "config"})})


@pytest.mark.parametrize("shape, expected", [([4, 84, 84], (4, 84, 84, False)), ([210, 160, 3], (3, 210, 160, True)),
                                             ([84, 84], (1, 84, 84, False)), ([36, 40, 1], (1, 36, 40, True))])
def test_image_layouts(shape: list[int], expected: tuple) -> None:
    assert image_layout(("pixels",), shape) == expected


@pytest.mark.parametrize("shape", [[3, 35, 84], [20, 20], [4, 84, 84, 3]])
def test_an_image_the_cnn_cannot_take_is_an_error_naming_it(shape: list[int]) -> None:
    spec = Composite(pixels=Bounded(0, 255, shape=shape, dtype=torch.uint8))
    with pytest.raises(ConfigError, match=r"obs.pixels: a uint8 image of shape \[.*\] cannot go through the Nature CNN, which takes \[C, H, W\] or \[H, W, C\] with H, W >= 36"):
        Algorithm(_SpecEnv.of(spec), num_envs=2, horizon=2)


def test_a_float_image_is_an_error_naming_its_key_and_dtype() -> None:
    spec = Composite(pixels=Unbounded([3, 84, 84]))
    with pytest.raises(ConfigError, match=r"obs.pixels has shape \[3, 84, 84\] \(torch.float32\).*uint8 images"):
        Algorithm(_SpecEnv.of(spec), num_envs=2, horizon=2)


@pytest.mark.parametrize("layout", ["hw", "chw", "hwc"])
def test_images_get_the_nature_cnn_and_the_buffer_holds_them_as_uint8(layout: str) -> None:
    algo = Algorithm(dots(layout), num_envs=4, horizon=8, seed=0)
    assert type(algo.policy.model) is NatureCNNModel
    obs = algo.buffer["obs"]
    assert obs.dtype == torch.uint8
    assert algo.memory_stats()["memory/buffer_bytes"] >= obs.numel()  # one byte per pixel
    algo.collect()
    assert obs.max() == 255 and (obs > 0).sum() == 4 * 9 * (1 if layout == "hw" else 3)  # one dot per frame
    assert "losses/total" in algo.step() and algo.env.observation_spec.shape == obs.shape[2:]


def test_chw_images_are_stored_channels_last_and_gathered_so() -> None:
    algo = Algorithm(dots("chw"), num_envs=2, horizon=4, seed=0)
    obs = algo.buffer["obs"]
    assert obs.stride()[2] == 1  # channels innermost
    algo.collect()
    rows = obs.reshape(-1, 3, SIDE, SIDE)[torch.tensor([0, 5, 3])]
    assert rows.is_contiguous(memory_format=torch.channels_last)


def test_frames_stacked_by_a_view_requirement_act_as_frames_the_env_stacks() -> None:
    by_view = Algorithm(DotImage, num_envs=4, horizon=16, model_config={"frame_stack": 4}, seed=0)
    by_env = Algorithm(frame_stacked(DotImage, 4), num_envs=4, horizon=16, seed=0)
    assert by_env.env.observation_spec.shape == torch.Size([4, SIDE, SIDE])
    for name, a in by_view.policy.state_dict().items():
        assert torch.equal(a, by_env.policy.state_dict()[name]), name
    torch.manual_seed(1)  # the same resets and draws on both sides
    view_stats = by_view.collect()
    torch.manual_seed(1)
    env_stats = by_env.collect()
    assert torch.equal(by_view.buffer["actions"], by_env.buffer["actions"])
    torch.testing.assert_close(by_view.buffer["values"], by_env.buffer["values"])
    assert view_stats["returns/mean"] == env_stats["returns/mean"]
    view_bytes, env_bytes = (a.memory_stats()["memory/buffer_bytes"] for a in (by_view, by_env))
    assert env_bytes - view_bytes >= 3 * 4 * 17 * SIDE * SIDE * 0.9  # the env's three extra frames per step


def test_mixed_observations_concatenate_vectors_after_the_convolutions_and_normalise_only_floats() -> None:
    spec = Composite(pixels=Bounded(0, 255, shape=[3, 40, 40], dtype=torch.uint8), speed=Unbounded(2))
    algo = Algorithm(_SpecEnv.of(spec), num_envs=2, horizon=4, normalize_observations=True, seed=0)
    model = algo.policy.model
    assert model.vector_paths == [("speed",)] and model.trunk[0].in_features == 64 * 1 * 1 + 2
    assert algo.policy.normalizer.keys() == ["obs.speed"]
    algo.collect()
    algo.step()


def test_image_models_share_a_trunk_so_privileged_groups_need_model_cls_and_recurrence_too() -> None:
    spec = Composite(pixels=Bounded(0, 255, shape=[40, 40], dtype=torch.uint8), privileged=Unbounded(2))
    with pytest.raises(ValueError, match="NatureCNNModel.s actor and critic share layers"):
        NatureCNNModel(spec, Categorical(3, shape=[1]), num_features=3,
                       obs_groups={"actor": ["pixels"], "critic": ["pixels", "privileged"]})
    with pytest.raises(ConfigError, match=r"The default MLP takes vector observations; obs has shape \[36, 36\]"):
        RecurrentAlgorithm(DotImage, num_envs=2, horizon=4)


def test_an_image_policy_exports_and_serves_raw_uint8_frames(tmp_path: Path) -> None:
    from rl8lite.tracking.export import save_policy_model

    algo = Algorithm(dots("chw"), num_envs=2, horizon=4, seed=0)
    algo.collect()
    frames = algo.buffer["obs"][:, :4].flatten(0, 1)
    with torch.no_grad():
        expected = algo.policy.act(frames, deterministic=True)[0].numpy()
    save_policy_model(algo.policy, algo.env.observation_spec, tmp_path / "policy")
    served = mlflow.pyfunc.load_model(str(tmp_path / "policy")).predict(frames.contiguous().numpy())
    np.testing.assert_array_equal(served, expected)


class _SpecEnv(DotImage):
    """An env observing random data of a given spec (only the spec matters to these tests)."""

    spec: Composite

    @classmethod
    def of(cls, spec: Composite) -> type[_SpecEnv]:
        return type("SpecEnv", (cls,), {"spec": spec})

    def __init__(self, num_envs: int, /, horizon: int | None = None, **kwargs) -> None:
        super().__init__(num_envs, horizon, **kwargs)
        self.observation_spec = self.spec

    def reset(self, *, config=None):
        super().reset()
        return self.spec.rand([self.num_envs])

    def step(self, action):
        out = super().step(action)
        out["obs"] = out["final_obs"] = self.spec.rand([self.num_envs])
        return out
