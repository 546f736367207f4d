"""Checkpoint files, written atomically and holding tensors and plain values only (read with
``torch.load(weights_only=True)``), and the global random streams they save."""

from __future__ import annotations

import contextlib
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from .imports import dotted_path

FORMAT = "rl8lite-checkpoint"
VERSION = 1
LATEST = "latest"


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, truncated or not an rl8lite checkpoint."""


def to_plain(value: Any, where: str) -> Any:
    """``value`` as data ``torch.load(weights_only=True)`` reads back (classes as dotted paths),
    else a :class:`CheckpointError` naming ``where``."""
    if isinstance(value, np.generic):  # first: np.float64 is also a Python float
        return value.item()
    if isinstance(value, (bool, int, float, str, type(None), torch.Tensor)):
        return value
    if isinstance(value, type):
        return dotted_path(value)
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return {k: to_plain(v, f"{where}.{k}") for k, v in value.items()}
    raise CheckpointError(f"cannot checkpoint {where} = {repr(value)[:120]}: checkpoints hold"
                          " numbers, strings, tensors and lists/dicts of them (classes as dotted"
                          " paths); pass plain values in configs")


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global RNGs."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """The global RNG states of python, numpy and torch (and CUDA when present)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                  "has_gauss": has_gauss, "cached_gaussian": cached},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set the global RNGs to what :func:`capture_rng` returned."""
    python, np_state = state["python"], state["numpy"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    np.random.set_state((np_state["kind"], np_state["keys"].numpy().astype(np.uint32),
                         np_state["pos"], np_state["has_gauss"], np_state["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[BinaryIO]:
    """A file beside ``path``, fsynced and renamed over it, the folder fsynced: a crash at any
    instant leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_atomic(payload: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``payload`` to ``path`` so that a crash at any instant leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(path) as f:
        torch.save(payload, f)
    return path


def rank_file(path: str | os.PathLike[str], rank: int) -> Path:
    """Rank ``rank``'s file of checkpoint ``path``: ``<stem>.rank<rank><suffix>`` (0: ``path``)."""
    path = Path(path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def numbered_checkpoints(folder: str | os.PathLike[str], rank: int = 0) -> list[tuple[int, Path]]:
    """``folder``'s checkpoints of ``rank`` as ``(env steps, path)``, fewest first."""
    pattern = re.compile(r"checkpoint-(\d+)" + (rf"\.rank{rank}" if rank else "") + r"\.pt")
    paths = Path(folder).glob("checkpoint-*.pt")
    return sorted((int(m.group(1)), p) for p in paths if (m := pattern.fullmatch(p.name)))


def point_latest(folder: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Record ``target`` in the plain file ``<folder>/latest`` (atomically): its name when it is
    in ``folder`` (which can move), else its absolute path."""
    folder, target = Path(folder), Path(target)
    folder.mkdir(parents=True, exist_ok=True)
    dest = target.name if target.parent.resolve() == folder.resolve() else str(target.resolve())
    with _replacing(folder / LATEST) as f:
        f.write(dest.encode("utf-8"))


def latest_in(folder: str | os.PathLike[str]) -> Path | None:
    """The checkpoint ``<folder>/latest`` names (it may since have been deleted), or ``None``."""
    try:
        dest = (Path(folder) / LATEST).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Path(folder) / dest if dest else None


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``); errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt zip, truncated file, foreign pickle
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt, truncated or not a safe"
                              f" rl8lite checkpoint: {e}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not an rl8lite checkpoint")
    if payload.get("version") != VERSION:
        raise CheckpointError(f"checkpoint {str(path)!r} has format version"
                              f" {payload.get('version')}, this rl8lite reads {VERSION}")
    return payload
