"""glibc malloc settings that stop CPU training from page-faulting its temporaries.

An update allocates and frees the same few MiB of activations and gradients
for every chunk. glibc's defaults hand blocks above a (self-adjusting) size
to ``mmap`` and give freed memory at the top of its heap back to the OS, so
those blocks are page-faulted in, zeroed by the kernel, and returned again,
chunk after chunk: on one CPU thread with 2x256 MLPs that was 80-240k page
faults per iteration and 12-14% of an update's time at 256-1024 envs (more when
another process competes for memory bandwidth). Serving blocks up to
32 MiB from the heap and keeping freed heap memory for reuse removes them.
The settings are process-wide; the process's resident memory then stays near
its peak instead of shrinking between updates.
"""

from __future__ import annotations

import ctypes
import os
import sys

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from malloc's heap (glibc's maximum on 64-bit).
MMAP_THRESHOLD = 32 * 2**20
#: Freed heap memory malloc keeps for reuse before it returns any to the OS.
TRIM_THRESHOLD = 2**30
#: Where a user tunes glibc malloc: any ``MALLOC_*`` variable, or malloc tunables in
#: ``GLIBC_TUNABLES``. Either set means the user's choice stands.
def user_malloc_settings(environ: dict[str, str] | None = None) -> list[str]:
    """The environment variables that tune glibc malloc, by name."""
    environ = dict(os.environ) if environ is None else environ
    names = [name for name in environ if name.startswith("MALLOC_")]
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        names.append("GLIBC_TUNABLES")
    return names


_applied = False


def keep_freed_memory() -> bool:
    """Apply the settings once per process; return whether they are in effect.

    Does nothing (and returns ``False``) off Linux, without glibc's ``mallopt``,
    or when the environment tunes malloc (:func:`user_malloc_settings`).
    """
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or user_malloc_settings():
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success.
    _applied = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    )
    return _applied
