"""README's porting rule: an rl8 script runs after renaming rl8 -> rl8lite and torchrl.data -> rl8lite.specs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "rl8_script.py"


def port(source: str) -> str:
    """The two renames of README's "Porting from rl8", nothing else."""
    return re.sub(r"\brl8\b", "rl8lite", source.replace("torchrl.data", "rl8lite.specs"))


def test_an_rl8_script_runs_after_the_renames(tmp_path: Path, mlflow_store: str) -> None:
    source = SCRIPT.read_text()
    assert "from rl8 import" in source and "from torchrl.data import" in source
    ported = tmp_path / "ported.py"
    ported.write_text(port(source))
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_store}
    done = subprocess.run([sys.executable, str(ported)], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("3 ['eval/")
