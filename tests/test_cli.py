"""The ``rl8lite train`` command and ``TrainConfig``, in a temporary MLflow store."""

from __future__ import annotations

import json
import os
import runpy
import sys
from importlib.metadata import entry_points
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch

from rl8lite import ConfigError
from rl8lite.cli import main
from rl8lite.env import DiscreteDummyEnv, Env
from rl8lite.trainers.train_config import TrainConfig, TrainConfigError, UnknownFieldError

NUM_ENVS, HORIZON = 4, 8
STEP = NUM_ENVS * HORIZON  # env steps per training step

CONFIG_YAML = f"""\
env_cls: rl8lite.env.DiscreteDummyEnv
algorithm_config:
  num_envs: {NUM_ENVS}
  horizon: {HORIZON}
  gamma: 0.9
  optimizer_config: {{lr: 3e-3}}    # YAML 1.1 would read 3e-3 as a string
  seed: 0
"""

FLAGS = ("--config-file", "--experiment-name", "--run-name", "--max-steps", "--steps-per-eval", "--save",
         "--no-progress")


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


class NoStepEnv(Env):
    """Forgot to define ``step``: abstract, so it cannot be built."""

    def reset(self, *, config: dict | None = None) -> torch.Tensor:
        return torch.zeros(self.num_envs, 1)


class StepBugEnv(DiscreteDummyEnv):
    """A bug in the user's own ``step`` (raises ValueError)."""

    def step(self, action: torch.Tensor):  # type: ignore[no-untyped-def]
        x, y = action.shape[0], 1, 2  # noqa: F841
        return super().step(action)


class InitBugEnv(DiscreteDummyEnv):
    """A bug in the user's own constructor (raises FileNotFoundError, an OSError)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        open(Path(__file__).with_name("no-such-env-data.csv"))  # noqa: SIM115


def runs_of(client: mlflow.MlflowClient, experiment_name: str) -> list[mlflow.entities.Run]:
    experiment = client.get_experiment_by_name(experiment_name)
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def test_train_from_yaml_saves_a_servable_policy(
    tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "config.yaml", CONFIG_YAML)
    model = tmp_path / "model"
    status = main(["train", "-f", str(config), "--max-steps", str(2 * STEP), "--save", str(model),
                   "--experiment-name", experiment_name, "--no-progress", "--run-name", "gamma-0.9"])
    assert status == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "until 64 env steps" in out and f"saved the policy to {model} (load it" in out and "mlflow ui" in out
    (run,) = runs_of(client, experiment_name)
    assert run.info.status == "FINISHED"
    assert "finished after 64 env steps; returns/mean" in out  # the env reports no episode ends
    assert run.info.run_name == "gamma-0.9"
    assert run.data.tags["rl8lite.config_file"] == str(config.resolve())
    assert run.data.params["gamma"] == "0.9" and run.data.params["env_cls"] == "rl8lite.env.base.DiscreteDummyEnv"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "env/steps")] == [STEP, 2 * STEP]
    obs = np.array([[-3.0], [0.5], [2.0]], dtype=np.float32)
    actions = np.asarray(mlflow.pyfunc.load_model(str(model)).predict(obs))
    assert actions.shape == (3, 1) and set(actions.ravel().tolist()) <= {0, 1}


def test_train_from_json_with_dotted_class_fields(
    tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "config.json", json.dumps({
        "env_cls": "rl8lite.env:DiscreteDummyEnv",
        "algorithm_config": {"num_envs": NUM_ENVS, "horizon": HORIZON, "horizons_per_env_reset": 1,
                             "optimizer_cls": "torch.optim.SGD", "optimizer_config": {"lr": 0.01}},
    }))
    status = main(["train", "--config-file", str(config), "--max-steps", str(STEP + 1), "--steps-per-eval", "1",
                   "--experiment-name", experiment_name, "--no-progress"])
    assert status == 0, capsys.readouterr().err
    (run,) = runs_of(client, experiment_name)
    assert run.data.params["optimizer_cls"] == "torch.optim.sgd.SGD"
    assert run.data.metrics["env/steps"] == 2 * STEP  # the step that passes --max-steps is the last
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/returns/mean")] == [STEP]


def test_ctrl_c_ends_the_run_killed_saves_and_returns_130(
    tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rl8lite.trainers.trainer import Trainer

    step = Trainer.step

    def interrupted_step(self: Trainer, **kwargs: object) -> dict[str, float]:
        if self.state["algorithm/steps"] == 2:
            raise KeyboardInterrupt
        return step(self, **kwargs)

    monkeypatch.setattr(Trainer, "step", interrupted_step)
    config = write(tmp_path, "config.yml", CONFIG_YAML)
    model = tmp_path / "model"
    # no --max-steps: trains until Ctrl-C
    status = main(["train", "-f", str(config), "--save", str(model), "--experiment-name", experiment_name,
                   "--no-progress"])
    assert status == 130
    (run,) = runs_of(client, experiment_name)
    assert run.info.status == "KILLED" and run.data.metrics["env/steps"] == 2 * STEP
    assert (model / "MLmodel").is_file()


BAD_FILES = {
    # name: (file name, contents, expected message fragment)
    "missing env_cls": ("c.yaml", "algorithm_config: {horizon: 8}\n", "missing env_cls"),
    "invalid YAML": ("c.yaml", "env_cls: [unclosed\n", "is not valid YAML"),
    "invalid JSON": ("c.json", '{"env_cls": ', "is not valid JSON"),
    "not a mapping": ("c.yaml", "- rl8lite.env.DiscreteDummyEnv\n", "must hold a mapping"),
    "wrong suffix": ("c.toml", "env_cls = 'x'\n", "must be a .yaml, .yml or .json file"),
    "unknown top-level key": ("c.yaml", "env_cls: rl8lite.env.DiscreteDummyEnv\nalgo_config: {}\n",
                              "unknown key(s) ['algo_config']"),
    "unimportable module": ("c.yaml", "env_cls: no_such_pkg.envs.MyEnv\n",
                            "cannot import env_cls 'no_such_pkg.envs.MyEnv': No module named 'no_such_pkg'"),
    "missing class": ("c.yaml", "env_cls: rl8lite.env.NoSuchEnv\n",
                      "'rl8lite.env' has no attribute 'NoSuchEnv'"),
    "misspelt class": ("c.yaml", "env_cls: rl8lite.examples.Cartpole\n",
                       "has no attribute 'Cartpole' (did you mean 'CartPole'?)"),
    "not a dotted path": ("c.yaml", "env_cls: DiscreteDummyEnv\n", "'DiscreteDummyEnv' is not a dotted path"),
    "unimportable class field": ("c.yaml", ("env_cls: rl8lite.env.DiscreteDummyEnv\n"
                                 "algorithm_config: {optimizer_cls: torch.optim.NoSuchOpt}\n"),
                                 "cannot import algorithm_config.optimizer_cls 'torch.optim.NoSuchOpt'"),
    "unknown field": ("c.yaml", "env_cls: rl8lite.env.DiscreteDummyEnv\nalgorithm_config: {horizn: 8}\n",
                      "unknown algorithm_config field(s) 'horizn' (did you mean 'horizon'?)"),
    "out of range": ("c.yaml", "env_cls: rl8lite.env.DiscreteDummyEnv\nalgorithm_config: {gamma: 1.5}\n",
                     "gamma must be in (0.0, 1.0], received 1.5"),
    "recurrent": ("c.yaml", "env_cls: rl8lite.env.DiscreteDummyEnv\nrecurrent: true\nalgorithm_config: {horizon: 6, seq_len: 4}\n",
                  "seq_len=4 must be a factor of horizon=6"),
    "abstract env": ("c.yaml", f"env_cls: {__name__}.NoStepEnv\n",
                     (f"env_cls '{__name__}.NoStepEnv' cannot be instantiated: it does not implement the abstract"
                     " method(s) step")),
    "abstract Env itself": ("c.yaml", "env_cls: rl8lite.env.Env\n",
                            ("env_cls 'rl8lite.env.Env' cannot be instantiated: it does not implement the abstract"
                            " method(s) reset, step")),
    "not an Env class": ("c.yaml", "env_cls: rl8lite.Algorithm\n",
                         ("env_cls 'rl8lite.Algorithm' must name a subclass of rl8lite.Env, received class"
                         " rl8lite.algorithms.algorithm.Algorithm")),
    "not a class": ("c.yaml", "env_cls: rl8lite.cli.build_parser\n",
                    ("env_cls 'rl8lite.cli.build_parser' must name a subclass of rl8lite.Env, received function"
                    " rl8lite.cli.build_parser")),
    "schedule value a string": ("c.yaml", ("env_cls: rl8lite.env.DiscreteDummyEnv\n"
                                "algorithm_config: {lr_schedule: [[0, '1e-3']]}\n"),
                                "lr_schedule[0] = [0, '1e-3']: the value must be a real number, received str '1e-3'"),
    "schedule value not a number": ("c.yaml", ("env_cls: rl8lite.env.DiscreteDummyEnv\n"
                                    "algorithm_config: {entropy_coeff_schedule: [[0, 1e-3], [10, abc]]}\n"),
                                    ("entropy_coeff_schedule[1] = [10, 'abc']: the value must be a real number,"
                                    " received str 'abc'")),
    "schedule step not an int": ("c.json", ('{"env_cls": "rl8lite.env.DiscreteDummyEnv",'
                                 ' "algorithm_config": {"lr_schedule": [[0, 0.1], ["8", 0.2]]}}'),
                                 "lr_schedule[1] = ['8', 0.2]: env_steps must be an int, received str '8'"),
    "not UTF-8": ("c.yaml", b"env_cls: rl8lite.env.DiscreteDummyEnv\n# caf\xe9 (latin-1)\n",
                  "not UTF-8 text: byte 0xe9 on line 2 (invalid continuation byte); save it as UTF-8"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_bad_config_is_one_line_and_status_2(
    case: str, tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, text, message = BAD_FILES[case]
    path = write(tmp_path, name, text)
    status = main(["train", "-f", str(path), "--max-steps", "1", "--experiment-name", experiment_name])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"rl8lite: error: {path}"), err
    assert message in err
    assert runs_of(client, experiment_name) == []  # nothing was trained or logged


def test_bad_command_line_is_status_2(
    tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "config.yaml", CONFIG_YAML.replace("seed: 0", "horizons_per_env_reset: 2"))
    cases = {
        "no such config file": (["-f", str(tmp_path / "missing.yaml")], f"{tmp_path / 'missing.yaml'}: no such config file"),
        "save folder taken": (["-f", str(config), "--save", str(tmp_path)],
                              f"--save {tmp_path}: already exists and is not an empty folder"),
    }
    for args, message in cases.values():
        assert main(["train", *args, "--experiment-name", experiment_name]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("rl8lite: error: ") and message in err, err
    assert main(["train", "-f", str(config), "--max-steps", "0"]) == 2  # argparse: usage + error
    assert "--max-env-steps/--max-steps: expected an int >= 1, received '0'" in capsys.readouterr().err
    assert main(["train"]) == 2 and "the following arguments are required: -f" in capsys.readouterr().err
    assert runs_of(client, experiment_name) == []


def test_unusable_save_target_is_status_2_before_training(
    tmp_path: Path, experiment_name: str, client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = write(tmp_path, "config.yaml", CONFIG_YAML)
    write(tmp_path, "file.txt", "")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    access = os.access
    # root passes os.access for any folder: fake a folder this user cannot write to
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != read_only and access(path, mode, **kw))
    cases = {
        "under a file": (tmp_path / "file.txt" / "sub", f"{tmp_path / 'file.txt'} is not a folder"),
        "deep under a file": (tmp_path / "file.txt" / "a" / "b", f"{tmp_path / 'file.txt'} is not a folder"),
        "read-only folder": (read_only / "new" / "policy", f"cannot write to the folder {read_only}"),
        "read-only empty folder": (read_only, f"cannot write to the folder {read_only}"),
    }
    if Path("/proc/self").is_dir():  # a pseudo file system; os.access says yes to root
        cases["under /proc"] = (Path("/proc/rl8lite-no-such-dir/policy"), "cannot write to the folder /proc")
    for case, (save, message) in cases.items():
        assert main(["train", "-f", str(config), "--max-steps", "1", "--save", str(save), "--no-progress",
                     "--experiment-name", experiment_name]) == 2, case
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"rl8lite: error: --save {save}: "), (case, err)
        assert message in err, (case, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "file.txt", "read-only"]
    assert list(read_only.iterdir()) == []  # nothing created by the check
    assert runs_of(client, experiment_name) == []  # nothing was trained or logged


@pytest.mark.parametrize("env_cls, error, message", [
    ("StepBugEnv", ValueError, "too many values to unpack"),
    ("InitBugEnv", FileNotFoundError, "no-such-env-data.csv"),
])
def test_a_bug_in_the_env_code_keeps_its_traceback(
    env_cls: str, error: type[Exception], message: str, tmp_path: Path, experiment_name: str,
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str],
) -> None:
    text = CONFIG_YAML.replace("rl8lite.env.DiscreteDummyEnv", f"{__name__}.{env_cls}")
    config = write(tmp_path, "config.yaml", text)
    with pytest.raises(error, match=message) as raised:  # not reduced to one line: the traceback reaches the user
        main(["train", "-f", str(config), "--max-steps", "1", "--experiment-name", experiment_name, "--no-progress"])
    assert Path(raised.traceback[-1].path) == Path(__file__)  # raised in the env's own code, named in the traceback
    assert "rl8lite: error" not in capsys.readouterr().err
    assert runs_of(client, experiment_name) == []


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["--help"]) == 0
    assert "train" in capsys.readouterr().out
    # the `rl8lite` console script and `python -m rl8lite` both run cli.main
    assert [ep.value for ep in entry_points(group="console_scripts", name="rl8lite")] == ["rl8lite.cli:main"]
    monkeypatch.setattr(sys, "argv", ["rl8lite", "train", "--help"])
    with pytest.raises(SystemExit) as exit_:  # in-process: a subprocess pays seconds of imports
        runpy.run_module("rl8lite", run_name="__main__")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rl8lite train")
    for flag in (*FLAGS, "-f"):
        assert flag in out, flag


def test_train_config_builds_a_trainer_with_the_configured_hyperparameters(
    tmp_path: Path, experiment_name: str
) -> None:
    config = TrainConfig.from_file(write(tmp_path, "config.yaml", CONFIG_YAML))
    assert config.env_cls is DiscreteDummyEnv and config.recurrent is False
    with config.build(experiment_name=experiment_name, progress=False) as trainer:
        hparams = trainer.algorithm.hparams
        assert (hparams.num_envs, hparams.horizon, hparams.gamma, hparams.seed) == (NUM_ENVS, HORIZON, 0.9, 0)
        assert trainer.algorithm.optimizer.param_groups[0]["lr"] == pytest.approx(3e-3)
        assert trainer.tracker.experiment_id == mlflow.get_experiment_by_name(experiment_name).experiment_id


def test_train_config_in_python() -> None:
    # rl8's form: a class, plus dotted paths (either separator) that are imported at construction
    config = TrainConfig("rl8lite.env:DiscreteDummyEnv", {"horizon": 4, "optimizer_cls": "torch.optim:SGD"})
    assert config.env_cls is DiscreteDummyEnv and config.algorithm_config["optimizer_cls"] is torch.optim.SGD
    algorithm = TrainConfig(DiscreteDummyEnv, {"num_envs": 2, "horizon": 4}).build_algorithm()
    assert algorithm.buffer.batch_size == torch.Size([2, 5])
    with pytest.raises(TypeError, match=r"'num_env' \(did you mean 'num_envs'\?\)") as unknown:
        TrainConfig(DiscreteDummyEnv, {"num_env": 2})
    assert isinstance(unknown.value, UnknownFieldError)
    with pytest.raises(ConfigError, match="horizon must be an int >= 1, received 0"):
        TrainConfig(DiscreteDummyEnv, {"horizon": 0})
    recurrent = TrainConfig(DiscreteDummyEnv, {"num_envs": 4, "horizon": 8, "seq_len": 4}, recurrent=True)
    assert recurrent.build_algorithm().policy.recurrent
    with pytest.raises(TrainConfigError, match="algorithm_config must be a mapping"):
        TrainConfig(DiscreteDummyEnv, [("horizon", 4)])  # type: ignore[arg-type]
    with pytest.raises(TrainConfigError, match=rf"env_cls class {__name__}\.NoStepEnv cannot be instantiated: .*step$"):
        TrainConfig(NoStepEnv)
    with pytest.raises(TrainConfigError, match="must be a subclass of rl8lite.Env or its dotted path, received int 5"):
        TrainConfig(5)  # type: ignore[arg-type]
    # whole-number env_steps read as floats (YAML's 1e4) and numpy scalars are valid schedule entries
    schedule = [(0, 1e-3), (1e4, np.float32(1e-4)), (np.int64(20_000), 0)]
    assert TrainConfig(DiscreteDummyEnv, {"lr_schedule": schedule}).to_algorithm_config().lr_schedule == schedule
