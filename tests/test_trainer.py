"""Trainer counters, evaluation at any step, run checks, stop conditions and context-manager use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound, UnknownStatError
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import CartPole


def make(experiment_name: str, k: int = 1, **kw) -> Trainer:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=3, horizons_per_env_reset=k, seed=0, **kw)
    return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)


def test_counters(experiment_name: str) -> None:
    trainer = make(experiment_name, k=2)
    stats = trainer.step()
    assert trainer.state == {"algorithm/collects": 1, "algorithm/steps": 1, "env/steps": 12}
    assert stats["env/steps"] == 12 and stats["algorithm/steps"] == 1
    trainer.step()
    trainer.eval()  # k collects (rl8's rule), no steps, no env steps
    assert trainer.state == {"algorithm/collects": 4, "algorithm/steps": 2, "env/steps": 24}
    trainer.close()


def test_with_k_collects_between_resets_an_eval_runs_after_a_multiple_of_k(
        experiment_name: str) -> None:
    # rl8's contract, which its own suite checks: with horizons_per_env_reset = k > 0 an
    # evaluation is k collects between env resets, and a run evaluates every multiple of k steps
    trainer = make(experiment_name, k=2)
    trainer.step()
    with pytest.raises(RuntimeError, match="horizons_per_env_reset=2"):
        trainer.eval()
    with pytest.raises(ValueError, match="steps_per_eval=1 must be a multiple"):
        trainer.run(steps_per_eval=1)
    trainer.step()
    trainer.eval()
    assert trainer.state["algorithm/collects"] == 4
    trainer.run(steps_per_eval=2, stop_conditions=[HitsUpperBound("algorithm/collects", 9)])
    # steps 3 and 4, an eval of 2 collects after step 4, step 5: 9 collects
    assert trainer.state["algorithm/collects"] == 9 and trainer.state["algorithm/steps"] == 5
    trainer.close()


def cartpole(experiment_name: str, **overrides: Any) -> Trainer:
    algo = Algorithm(CartPole, num_envs=4, horizon=8, seed=0, shuffle_minibatches=False,
                     env_config={"max_episode_steps": 20}, **overrides)
    return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)


@pytest.mark.parametrize("config", [None, {"length": 1.0}])
def test_eval_at_any_step_leaves_training_as_it_was(experiment_name: str, config: dict | None) -> None:
    def train(evaluate: bool) -> tuple[list[torch.Tensor], torch.Tensor, dict[str, float]]:
        trainer = cartpole(experiment_name)
        trainer.step()
        trainer.algorithm.collect()  # a collect not yet trained on, mid-episode
        last_obs = trainer.algorithm.buffer["obs"][:, -1].clone()
        if evaluate:
            stats = trainer.eval(env_config=config, name="other")
            assert stats["eval/other/env/steps"] == 4 * 8 * 3  # ceil(20 / 8) collects: the longest episode
            assert stats["eval/other/episodes/count"] >= 4
        trainer.algorithm.step()  # the collect's data, as it was
        params = [p.detach().clone() for p in trainer.algorithm.policy.parameters()]
        step = trainer.step()  # the env goes on where it was, under the training config
        assert step["env/resets"] == 0 and trainer.algorithm.env.params["length"] == 0.5
        assert torch.equal(trainer.algorithm.buffer["obs"][:, 0], last_obs)
        trainer.close()
        return params, last_obs, step

    (with_eval, obs_eval, _), (without, obs, _) = train(True), train(False)
    assert torch.equal(obs_eval, obs)
    for a, b in zip(with_eval, without):  # a whole-buffer update of the same data: the same step
        assert torch.equal(a, b)


class ForgetfulCartPole(CartPole):
    """A CartPole that cannot restore its state (as a Gymnasium env): reset after an eval."""

    restores_state = False


def test_an_env_that_cannot_restore_its_state_is_reset_after_an_eval(experiment_name: str) -> None:
    algo = Algorithm(ForgetfulCartPole, num_envs=4, horizon=8, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)
    assert trainer.step()["env/resets"] == 4 and trainer.step()["env/resets"] == 0
    trainer.eval(env_config={"length": 1.0})
    assert trainer.step()["env/resets"] == 4 and algo.env.params["length"] == 0.5  # the training config
    trainer.close()


def test_run_checks(experiment_name: str) -> None:
    trainer = make(experiment_name, k=2)
    with pytest.raises(ValueError, match="steps_per_eval must be an int >= 1 or None, received 0"):
        trainer.run(steps_per_eval=0)
    with pytest.raises(ValueError, match="keep_checkpoints must be an int >= 1, received 0"):
        trainer.run(keep_checkpoints=0)
    assert trainer.state["algorithm/steps"] == 0  # nothing ran
    trainer.close()


def test_an_interval_longer_than_the_run_is_a_warning(experiment_name: str) -> None:
    trainer = make(experiment_name)
    with pytest.warns(RuntimeWarning, match=r"steps_per_eval=8 counts training steps, and this run took 2"):
        trainer.run(steps_per_eval=8, stop_conditions=[HitsUpperBound("algorithm/steps", 2)])


def test_run_stops_on_conditions_and_evaluates(experiment_name: str) -> None:
    trainer = make(experiment_name, k=2)
    seen = []

    def spy(stats):
        seen.append(stats["algorithm/steps"])
        return stats["algorithm/steps"] >= 4

    stats = trainer.run(steps_per_eval=2, stop_conditions=[spy])
    assert seen == [1, 2, 3, 4] and stats["algorithm/steps"] == 4
    # 4 train collects + 1 eval (after step 2) of k = 2 collects; no eval after the last step
    assert trainer.state["algorithm/collects"] == 6


def test_a_tracker_with_only_the_protocols_members_trains_checkpoints_and_films(tmp_path: Path) -> None:
    from .trackers import RecordingTracker

    tracker = RecordingTracker(tmp_path)
    trainer = Trainer(Algorithm(CartPole, num_envs=4, horizon=8, seed=0), tracker=tracker, progress=False)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)], checkpoint_every=1, steps_per_video=1)
    calls = [name for name, _ in tracker.calls]
    assert calls[0] == "log_params" and calls[-1] == "end" and "log_policy" in calls and "log_image" in calls
    resumed = Trainer.from_checkpoint(tmp_path, tracker=RecordingTracker(tmp_path, resumed=True), progress=False)
    assert resumed.state["algorithm/steps"] == 2 and resumed.step()["algorithm/steps"] == 3


def test_unknown_stop_condition_key_is_named(experiment_name: str) -> None:
    trainer = make(experiment_name)
    with pytest.raises(UnknownStatError, match="'returns/meen', which is not a train stat"):
        trainer.run(stop_conditions=[HitsUpperBound("returns/meen", 0.0)])


def test_progress_line(experiment_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    algo = Algorithm(DiscreteDummyEnv, num_envs=4, horizon=3, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    lines = capsys.readouterr().out.strip().splitlines()
    # step 1 (the first report), then the final step once (at most a line a second)
    assert [line.split(" | ")[0] for line in lines] == ["step 1", "step 2"]
    # the return first (an infinite-horizon env's: the horizon's), the env steps last
    assert lines[-1].startswith("step 2 | returns/mean") and lines[-1].endswith("| env steps 24")
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 3)])
    assert [line.split(" | ")[0] for line in capsys.readouterr().out.strip().splitlines()] == ["step 3"]
    quiet = make(experiment_name)
    quiet.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    assert capsys.readouterr().out == ""


class ClosingEnv(DiscreteDummyEnv):
    """Counts its close() calls."""

    closes = 0

    def close(self) -> None:
        type(self).closes += 1


def test_closing_a_trainer_or_leaving_its_block_closes_the_env(experiment_name: str) -> None:
    ClosingEnv.closes = 0
    Trainer(Algorithm(ClosingEnv, num_envs=2, horizon=2), experiment_name=experiment_name, progress=False).close()
    assert ClosingEnv.closes == 1
    trainer = Trainer(Algorithm(ClosingEnv, num_envs=2, horizon=2), experiment_name=experiment_name, progress=False)
    with pytest.raises(ZeroDivisionError), trainer:
        raise ZeroDivisionError
    assert ClosingEnv.closes == 2, "closed on the way out of a failing with block too"
