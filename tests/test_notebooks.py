"""The notebooks run top to bottom (quick mode), into a temporary MLflow store only."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import mlflow
import nbformat
import pytest
from nbclient import NotebookClient

from rl8lite.examples.configs import CARTPOLE

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
QUICKSTART = NOTEBOOKS / "quickstart.ipynb"
EXPERIMENT = "CartPole-quickstart"  # the notebook's EXPERIMENT
QUICK_EVALS = ("default", "heavy_pole")  # the notebook's EVAL_CONFIGS in quick mode


def code_cells(nb: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    return {cell.id: cell for cell in nb.cells if cell.cell_type == "code"}


def stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def runs_in_repo_store(run_ids: list[str]) -> list[str]:
    """Which of ``run_ids`` the repo's own store holds (read-only; never creates it)."""
    db = REPO / "mlruns" / "mlflow.db"
    if not db.exists():
        return []
    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
        marks = ",".join("?" * len(run_ids))
        return [row[0] for row in conn.execute(f"SELECT run_uuid FROM runs WHERE run_uuid IN ({marks})", run_ids)]


def test_quickstart_is_committed_without_outputs() -> None:
    nb = nbformat.read(QUICKSTART, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in code_cells(nb).values():
        assert cell.outputs == [] and cell.execution_count is None, f"cell {cell.id} has outputs"
    assert 'QUICK = os.environ.get("RL8LITE_QUICK") == "1"' in code_cells(nb)["parameters"].source


@pytest.mark.slow
def test_quickstart_runs_in_quick_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A store of its own (the kernel inherits the environment): exactly the notebook's runs.
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("RL8LITE_QUICK", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch in the kernel: one thread, as in the tests
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel picks its inline backend only where unset
    source = QUICKSTART.read_bytes()
    folder_before = sorted(p.name for p in NOTEBOOKS.iterdir())

    nb = nbformat.read(QUICKSTART, as_version=4)
    # Raises CellExecutionError, with the cell and its traceback, if any cell fails.
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()

    cells = code_cells(nb)
    assert not [o for c in cells.values() for o in c.outputs if o.output_type == "error"]
    assert f"tracking store: {store}" in stdout(cells["build"])
    assert any("image/png" in o.get("data", {}) for o in cells["plot"].outputs)
    comparison = "".join(o.data.get("text/plain", "") for o in cells["search"].outputs if "data" in o)
    assert "baseline" in comparison and "lr=1e-3" in comparison
    assert "episode length:" in stdout(cells["rollout"])
    ui = stdout(cells["ui"])
    assert f"ui --backend-store-uri {store} --host 127.0.0.1 --port 5000" in ui
    assert "runs?workflowType=machine_learning" in ui

    # The temporary store got both runs, finished, with training and eval metrics.
    client = mlflow.MlflowClient(store)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["baseline", "lr=1e-3"]
    baseline = json.loads(runs["baseline"].data.params["optimizer_config"])
    assert baseline["lr"] == CARTPOLE["optimizer_config"]["lr"]
    assert json.loads(runs["lr=1e-3"].data.params["optimizer_config"])["lr"] == 0.001
    for run in runs.values():
        assert run.info.status == "FINISHED"
        metrics = run.data.metrics
        assert metrics["env/steps"] >= 8_192
        for name in QUICK_EVALS:
            assert f"eval/{name}/episodes/return_mean" in metrics
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "returns/mean")]
        assert steps == [(CARTPOLE["num_envs"] * CARTPOLE["horizon"]) * i for i in range(1, len(steps) + 1)]  # one point per step, at env steps
        models = client.search_logged_models([experiment.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'")
        assert [m.name for m in models] == ["policy"], "policy not logged as the run's model"
    assert [a.path for a in client.list_artifacts(runs["baseline"].info.run_id, "plots")] == ["plots/eval_returns.png"]
    videos = [a.path for a in client.list_artifacts(runs["baseline"].info.run_id, "videos/baseline")]
    assert len(videos) == 1 and videos[0].endswith(".mp4")
    (version,) = client.search_model_versions("name='cartpole-quickstart'")
    assert version.run_id == runs["baseline"].info.run_id

    # Nothing went to the repo: no store in notebooks/, no run in mlruns/, notebook not rewritten.
    assert sorted(p.name for p in NOTEBOOKS.iterdir()) == folder_before
    assert runs_in_repo_store([r.info.run_id for r in runs.values()]) == []
    assert QUICKSTART.read_bytes() == source
