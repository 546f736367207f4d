"""The process-wide malloc settings CPU training applies when asked (``tune_malloc``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import rl8lite.algorithms.algorithm
from rl8lite import Algorithm
from rl8lite.env import DiscreteDummyEnv
from rl8lite.runtime import memory as malloc

# A child process: page faults of an allocate-and-free loop of 2 MiB blocks, with
# and without the settings. 96 MiB freed at once exceeds any trim threshold glibc's
# dynamic adjustment can reach (2 x 32 MiB), so by default it is usually trimmed and
# faulted in again every round (~245k faults; not always: when another block sits
# above it in the heap nothing can be trimmed). With the settings, never.
CHILD = """
import resource, sys
import torch
from rl8lite.runtime import memory as malloc
if sys.argv[1] == "1":
    assert malloc.keep_freed_memory()
    assert malloc.keep_freed_memory()  # idempotent
def churn():
    for _ in range(10):
        blocks = [torch.ones(512, 1024) for _ in range(48)]  # 2 MiB each, touched
        del blocks
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def child_page_faults(apply: bool) -> int:
    env = {k: v for k, v in os.environ.items() if k not in malloc.user_malloc_settings()}
    done = subprocess.run([sys.executable, "-c", CHILD, "1" if apply else "0"], env=env,
                          capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings are Linux-only")
def test_settings_stop_the_allocate_free_page_faults() -> None:
    assert child_page_faults(True) < 100


@pytest.mark.parametrize(
    "name, value", [("MALLOC_TRIM_THRESHOLD_", "131072"), ("MALLOC_ARENA_MAX", "2"),
                    ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072")]
)
def test_user_malloc_settings_in_the_environment_win(name: str, value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for other in malloc.user_malloc_settings():
        monkeypatch.delenv(other)
    monkeypatch.setenv(name, value)
    assert malloc.user_malloc_settings() == [name]
    assert malloc.keep_freed_memory() is False
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0")  # not malloc's
    monkeypatch.delenv(name)
    assert malloc.user_malloc_settings() == []


@pytest.mark.parametrize("tune_malloc", [True, False, None])
def test_cpu_algorithms_apply_it_only_when_asked(tune_malloc: bool | None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(rl8lite.algorithms.algorithm, "keep_freed_memory", lambda: calls.append(True) or True)
    options = {} if tune_malloc is None else {"tune_malloc": tune_malloc}
    Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, device="cpu", **options)
    assert calls == ([True] if tune_malloc else [])  # a library sets no process-wide state by default
