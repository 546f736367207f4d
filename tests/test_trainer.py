"""Trainer counters, rl8's eval/run checks, stop conditions and context-manager use."""

from __future__ import annotations

import pytest

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
    trainer.eval()  # k = 2: two collects, no steps, no env steps
    assert trainer.state == {"algorithm/collects": 4, "algorithm/steps": 2, "env/steps": 24}
    trainer.close()


def test_eval_between_resets_is_a_runtime_error(experiment_name: str) -> None:
    trainer = make(experiment_name, k=2)
    trainer.step()
    with pytest.raises(RuntimeError, match=r"eval can only be called every horizons_per_env_reset=2 collects \(now 1 collects\)"):
        trainer.eval()
    trainer.close()


def test_eval_env_config_with_negative_k_after_first_collect(experiment_name: str) -> None:
    trainer = make(experiment_name, k=-1)
    trainer.eval(env_config={"bounds": 10.0})  # before any collect: allowed, it resets the env
    with pytest.raises(ValueError, match="horizons_per_env_reset < 0 means the env is reset only once"):
        trainer.eval(env_config={"bounds": 10.0})
    trainer.eval()  # without a config it is fine
    trainer.close()


def test_an_eval_config_before_the_first_collect_does_not_stick_to_training(experiment_name: str) -> None:
    algo = Algorithm(CartPole, num_envs=4, horizon=3, horizons_per_env_reset=-1, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)
    trainer.eval(env_config={"length": 1.0})  # k < 0: allowed before any collect
    assert algo.env.params["length"] == 1.0
    stats = trainer.step()  # the first training collect resets the env under its own config
    assert stats["env/resets"] == 4 and algo.env.params["length"] == 0.5
    assert trainer.step()["env/resets"] == 0  # and never again (k < 0)
    trainer.close()


def test_run_checks(experiment_name: str) -> None:
    trainer = make(experiment_name, k=2)
    with pytest.raises(ValueError, match=r"steps_per_eval=3 must be a multiple of horizons_per_env_reset=2"):
        trainer.run(steps_per_eval=3, stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
    with pytest.raises(ValueError, match="steps_per_eval must be an int >= 1"):
        trainer.run(steps_per_eval=0)
    trainer.close()
    negative = make(experiment_name, k=-1)
    with pytest.raises(ValueError, match="eval_env_config was given, but horizons_per_env_reset < 0"):
        negative.run(eval_env_config={"bounds": 1.0}, stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
    assert negative.state["algorithm/steps"] == 0  # nothing ran
    negative.close()


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
    assert lines[-1].startswith("step 2 | env steps 24 | returns/mean")
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
