"""Rollout videos: a separate one-copy env, rendered, encoded, logged with a poster frame."""

from __future__ import annotations

from pathlib import Path

import av
import mlflow
import numpy as np
import pytest
import torch
from PIL import Image

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import CartPole
from rl8lite.trainers import videos as video

from .helpers import MemoryTracker


def cartpole_trainer(experiment_name: str, **options) -> Trainer:
    return Trainer(Algorithm(CartPole, num_envs=8, horizon=16, seed=0, horizons_per_env_reset=1),
                   experiment_name=experiment_name, progress=False, **options)


def decoded_mp4(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def decoded_gif(path: Path) -> list[np.ndarray]:
    frames = []
    with Image.open(path) as image:
        for index in range(image.n_frames):
            image.seek(index)
            frames.append(np.asarray(image.convert("RGB")))
    return frames


def first_frame_after_the_same_reset(rng_state: torch.Tensor, config: dict | None) -> np.ndarray:
    torch.set_rng_state(rng_state)
    env = CartPole(1, 16)
    env.reset(config=config)
    return env.render()


@pytest.mark.parametrize("mp4", [True, False], ids=["mp4", "gif"])
def test_record_video_logs_the_episode_of_a_separate_env_with_a_poster_frame(
    mp4: bool, experiment_name: str, client: mlflow.MlflowClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(video, "mp4_available", lambda: mp4)
    trainer = cartpole_trainer(experiment_name)
    trainer.step()
    before = torch.get_rng_state()
    config = {"length": 1.0}
    path = trainer.record_video(env_config=config, name="long_pole", max_steps=40)
    assert torch.equal(torch.get_rng_state(), before)  # the training random stream did not move
    steps = trainer.state["env/steps"]
    assert path == f"videos/long_pole/step_{steps}.{'mp4' if mp4 else 'gif'}"
    local = Path(client.download_artifacts(trainer.tracker.run_id, path, str(tmp_path)))
    frames = decoded_mp4(local) if mp4 else decoded_gif(local)
    trainer.tracker.flush()
    length = client.get_run(trainer.tracker.run_id).data.metrics["videos/long_pole/length"]
    assert len(frames) == length and 1 <= length <= 40
    assert frames[0].shape == (400, 600, 3)  # CartPole's frames are within the 640-pixel width
    expected = first_frame_after_the_same_reset(before, config).astype(float)
    # lossy codecs: the frames agree on average (a different reset state moves the cart tens of pixels)
    assert np.abs(frames[0].astype(float) - expected).mean() < 3.0
    posters = [a.path for a in client.list_artifacts(trainer.tracker.run_id, "images")]
    assert f"images/videos~long_pole+step+{steps}+timestamp" in " ".join(posters), posters  # the image slider
    trainer.close()


def test_recording_leaves_training_exactly_as_without_it(experiment_name: str) -> None:
    def train(record: bool) -> list[torch.Tensor]:
        trainer = cartpole_trainer(experiment_name, save_policy=False)
        trainer.step()
        if record:
            trainer.record_video(max_steps=30)
        trainer.step()
        trainer.close()
        return [p.detach().clone() for p in trainer.algorithm.policy.parameters()]

    for a, b in zip(train(False), train(True), strict=True):
        assert torch.equal(a, b)


def test_run_films_copy_0_of_the_training_env_and_once_more_at_the_end(
    experiment_name: str, client: mlflow.MlflowClient
) -> None:
    trainer = cartpole_trainer(experiment_name, save_policy=False)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 6)], steps_per_video=2)
    run_id = trainer.tracker.run_id
    videos = sorted(int(a.path.split("step_")[1].split(".")[0]) for a in client.list_artifacts(run_id, "videos/training"))
    # copy 0's next whole episode after step 2 (and after the step that logged it), then a last one at the end
    assert len(videos) >= 2 and 2 * 128 < videos[0] < videos[-1] == 6 * 128
    history = client.get_metric_history(run_id, "videos/training/length")
    assert len(history) == len(videos) and all(m.value >= 1 for m in history)
    trainer.close()


def test_an_env_without_render_is_a_clear_error_and_only_a_warning_in_run() -> None:
    trainer = Trainer(Algorithm(DiscreteDummyEnv, num_envs=4, horizon=4), tracker=MemoryTracker(), progress=False)
    with pytest.raises(NotImplementedError, match="DiscreteDummyEnv has no render\\(\\): videos need an RGB frame"):
        trainer.record_video()
    with pytest.warns(RuntimeWarning, match="no rollout videos: DiscreteDummyEnv has no render"):
        trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)], steps_per_video=1)
    assert trainer.state["algorithm/steps"] == 3  # training went on


def test_logging_a_filming_without_frames_is_a_clear_error() -> None:
    tracker = MemoryTracker()
    with pytest.raises(ValueError, match="no frames were filmed"):
        video.log_video(tracker, video.Filming(CartPole(1), 5), name="rollout", env_steps=0)
    assert not tracker.artifacts


def test_frames_are_checked_and_large_ones_downscaled() -> None:
    with pytest.raises(ValueError, match=r"Env.render\(\) must return an RGB uint8 array \[H, W, 3\], received float64"):
        video.check_frame(np.zeros((4, 4, 3)), "Env.render()")
    small = video.downscale(np.zeros((1080, 1920, 3), dtype=np.uint8))
    assert small.shape == (360, 640, 3)
    assert video.downscale(np.zeros((401, 601, 3), dtype=np.uint8)).shape == (400, 600, 3)  # even sides
