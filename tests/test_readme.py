"""The README's Python programs run as written, in quick mode (every ``run`` stops after two
training steps, an evaluation left to run the env's longest episode runs two collects: 211 for
Breakout's whole games), into the test's MLflow store. Blocks that start with an import are programs;
the others continue one (``trainer.run(...)`` lines) and are named here so that none is missed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rl8lite import Algorithm, Trainer
from rl8lite.conditions import HitsUpperBound

README = Path(__file__).parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
#: How each fragment begins: the lines a program would continue with (names defined elsewhere).
FRAGMENTS = ("env = MySimulatorEnv(", "from mjlab.envs import ManagerBasedRlEnv",
             "from rl8lite import RecurrentAlgorithm, RecurrentTrainer", "model = mlflow.pyfunc.load_model(",
             "trainer.record_video(", "trainer.run(stop_conditions=[...]")
PROGRAMS = [b for b in BLOCKS if b.startswith(("from ", "import ")) and not b.startswith(FRAGMENTS)]


def test_every_block_is_a_program_or_a_known_fragment() -> None:
    others = [b.splitlines()[0] for b in BLOCKS if b not in PROGRAMS]
    assert len(PROGRAMS) >= 3
    assert all(line.startswith(FRAGMENTS) for line in others), others


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_the_readmes_programs_run_as_written(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    program = PROGRAMS[index]
    if "gymnasium" in program:
        pytest.importorskip("gymnasium")
    if "Go2" in program:
        pytest.importorskip("genesis")
    if "envpool" in program or "ale_py" in program:
        pytest.importorskip("envpool")
        pytest.importorskip("ale_py")
    run = Trainer.run

    def quick_run(self: Trainer, **kwargs: object) -> dict[str, float]:
        steps = self.state["algorithm/steps"] + 2
        stop = [*(kwargs.pop("stop_conditions", None) or []), HitsUpperBound("algorithm/steps", steps)]
        return run(self, stop_conditions=stop, **kwargs)

    evaluate = Algorithm.evaluate

    def quick_evaluate(self: Algorithm, *, collects: int | None = None, **kwargs: object) -> dict[str, float]:
        return evaluate(self, collects=collects or 2, **kwargs)

    monkeypatch.setattr(Trainer, "run", quick_run)
    monkeypatch.setattr(Algorithm, "evaluate", quick_evaluate)
    monkeypatch.setattr(Trainer, "__init__", _quiet(Trainer.__init__))
    namespace: dict[str, object] = {"__name__": "readme"}
    exec(compile(program, f"README.md python block {index}", "exec"), namespace)  # noqa: S102


def _quiet(init):  # type: ignore[no-untyped-def]
    def without_progress(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("progress", False)
        init(self, *args, **kwargs)

    return without_progress
