"""Where a benchmark figure comes from: date, machine, software and commit, kept with the results.

Every script's ``--json`` file is written by :func:`write_results`, which adds a
``"provenance"`` entry, so each committed figure names the date, the machine and
the commit it was measured at.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance() -> dict[str, Any]:
    """Date (UTC), commit (``+dirty`` with uncommitted changes; ``RL8LITE_COMMIT`` where the
    copy has no git history, as on a lent GPU machine), CPU (model, torch's vector ISA), cores,
    GPU, versions."""
    commit = os.environ.get("RL8LITE_COMMIT") or _git("rev-parse", "--short=10", "HEAD")
    # results files are not code: a script writing one must not mark the next one dirty
    dirty = not os.environ.get("RL8LITE_COMMIT") and bool(_git(
        "status", "--porcelain", "--untracked-files=no", "--", "rl8lite", "benchmarks", ":(exclude)benchmarks/results"))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit + ("+dirty" if dirty else ""),
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "argv": sys.argv[1:],
    }


def _strict(value: Any) -> Any:
    """``value`` with every NaN float as ``None``: NaN is not JSON, and strict readers reject it."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


def write_results(path: str | os.PathLike[str], results: dict[str, Any]) -> None:
    """Write ``results`` as JSON with their :func:`provenance` first (a NaN is written ``null``)."""
    with open(path, "w") as f:
        json.dump(_strict({"provenance": provenance(), **results}), f, indent=2, allow_nan=False)
        f.write("\n")
