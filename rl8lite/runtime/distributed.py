"""Data-parallel training processes (``torchrun``): the process group, collectives, and failures
shared through the job's store (a watchdog ends a rank still blocked in NCCL)."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

FAILURE_KEY = "rl8lite/failure"


class DistributedError(RuntimeError):
    """A bad multi-process set-up, or another rank's failure (the message names the rank)."""


class Ranks:
    """This process's ``rank`` of ``world_size`` (``local_rank`` on its machine) and collectives
    between the ranks (no-ops in one process; ``collective_seconds``: their wall time so far)."""

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.collective_seconds = 0.0
        #: Called with the message when the watchdog ends this process (rank 0 ends its run).
        self.on_peer_failure: list[Callable[[str], None]] = []
        # this rank posted a failure / raised because of another rank's failure
        self._failed = self._noticed = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, which talks to MLflow and prints."""
        return self.rank == 0

    def all_reduce_(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` in place over every rank (``"sum"``, ``"max"`` or ``"min"``)."""
        if self.distributed:
            ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
            self._collective(lambda: dist.all_reduce(tensor, op=ops[op]))
        return tensor

    def sum(self, values: Sequence[float | torch.Tensor], device: torch.device | str = "cpu"
            ) -> torch.Tensor:
        """The float64 sums over ranks of ``values`` (one collective)."""
        values = [torch.as_tensor(v, dtype=torch.float64, device=device) for v in values]
        return self.all_reduce_(torch.stack(values))

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        if self.distributed:
            self._collective(lambda: dist.broadcast(tensor, src=src))
        return tensor

    def all_gather_object(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (pickled: for set-up checks, not the hot path)."""
        if not self.distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        self._collective(lambda: dist.all_gather_object(gathered, obj))
        return gathered

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` (gathered: for set-up, not the hot path)."""
        return self.all_gather_object(obj)[src] if self.distributed else obj

    def agree(self, flags: Sequence[float]) -> list[float]:
        """The largest value of each flag over all ranks: a decision taken on any rank (a stop,
        a signal) takes effect on every rank at the same step."""
        values = torch.tensor([float(f) for f in flags], dtype=torch.float64)
        return self.all_reduce_(values, "max").tolist()

    def barrier(self) -> None:
        self.agree([0.0])

    def _collective(self, call: Callable[[], Any]) -> None:
        start = time.perf_counter()
        try:
            call()
        except RuntimeError as e:  # gloo: a peer closed its connection (it failed or died)
            self._noticed = True
            posted = _read_failure(timeout_s=3.0)
            if posted is not None and posted[0] != self.rank:
                raise DistributedError(f"rank {posted[0]} failed: {posted[1]}") from e
            raise DistributedError("another rank stopped (killed, or crashed without reporting an"
                                   f" error): {str(e).splitlines()[0]}") from e
        finally:
            self.collective_seconds += time.perf_counter() - start

    @contextlib.contextmanager
    def sharing_failures(self) -> Iterator[None]:
        """Post an exception raised inside to the other ranks, and close the process group."""
        try:
            yield
        except DistributedError:
            raise
        except BaseException as e:
            if self.distributed and not self._failed:
                self._failed = True
                with contextlib.suppress(Exception):
                    _store().compare_set(FAILURE_KEY, "", f"{self.rank}\n{type(e).__name__}: {e}")
                with contextlib.suppress(Exception):
                    dist.destroy_process_group()
            raise

    def _watch_failures(self, grace_s: float = 10.0, poll_s: float = 0.5) -> None:
        """End this process when it has not noticed another rank's posted failure within
        ``grace_s`` (blocked in a collective that does not see a dead peer)."""
        while dist.is_initialized():
            posted = _read_failure(timeout_s=0.0)
            if posted is not None and posted[0] != self.rank:
                time.sleep(grace_s)
                if not self._noticed:
                    message = f"rank {posted[0]} failed: {posted[1]}"
                    for callback in self.on_peer_failure:
                        with contextlib.suppress(Exception):
                            callback(message)
                    os._exit(1)
                return
            time.sleep(poll_s)

    def _leave_group(self) -> None:
        """At exit, wait for every rank, then close the group (else a peer's gloo aborts)."""
        if not dist.is_initialized():
            return
        if not (self._failed or self._noticed):
            with contextlib.suppress(Exception):
                self.barrier()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def shares_failures(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a method of an object with ``ranks`` under :meth:`Ranks.sharing_failures`."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.ranks.sharing_failures():
            return method(self, *args, **kwargs)
    return wrapper


def _store() -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def _read_failure(timeout_s: float) -> tuple[int, str] | None:
    """The ``(rank, error)`` a rank posted, waited for up to ``timeout_s``; ``None`` if none."""
    store, deadline = _store(), time.monotonic() + timeout_s
    while store is not None:
        with contextlib.suppress(Exception):
            if store.check([FAILURE_KEY]):
                rank, _, message = store.get(FAILURE_KEY).decode().partition("\n")
                return int(rank), message
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return None


def process_rank() -> tuple[int, int, int]:
    """``(rank, world size, local rank)``: the process group's, else torchrun's variables."""
    local = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), local
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1), local


def resolve_device(setting: Any) -> torch.device:
    """``setting`` as a torch device (``"auto"``: CUDA if available), else a ``ValueError``."""
    if isinstance(setting, str) and setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(setting)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {setting!r} is not a valid torch device: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {setting!r} requested but CUDA is not available")
    return device


def rank_device(setting: Any, local_rank: int, cuda_available: bool) -> torch.device:
    """This rank's device: ``"auto"`` and ``"cuda"`` become ``cuda:LOCAL_RANK`` (where CUDA is
    available); another CUDA index is an error."""
    if isinstance(setting, str) and setting == "auto":
        return torch.device("cuda", local_rank) if cuda_available else torch.device("cpu")
    device = torch.device(setting)
    if device.type == "cuda":
        if device.index is None:
            return torch.device("cuda", local_rank)
        if device.index != local_rank:
            raise DistributedError(f"device={str(setting)!r} on the process with LOCAL_RANK="
                                   f"{local_rank}: each process trains on cuda:LOCAL_RANK; pass"
                                   f" device='cuda' (or 'auto') to use cuda:{local_rank}")
    return device


def check_backend(backend: str, device: torch.device) -> None:
    """NCCL needs CUDA tensors; gloo on GPUs works but copies through the host."""
    if backend == "nccl" and device.type != "cuda":
        raise DistributedError("the process group uses the NCCL backend, which needs CUDA"
                               f" devices, but this rank trains on {device}: use the gloo backend"
                               " on CPUs (rl8lite picks it when it starts the group)")
    if backend == "gloo" and device.type == "cuda":
        warnings.warn("the process group uses gloo while training on CUDA: gradients go through"
                      " the host; NCCL is faster", RuntimeWarning, stacklevel=3)


def join_process_group(device_setting: Any) -> tuple[Ranks, torch.device]:
    """This process's :class:`Ranks` and device, joining the default process group where one is
    initialised or ``torchrun`` asks for several processes (starting it: gloo or NCCL)."""
    _, world_size, local_rank = process_rank()
    if not dist.is_available() or not (dist.is_initialized() or world_size > 1):
        return Ranks(), resolve_device(device_setting)
    device = rank_device(device_setting, local_rank, torch.cuda.is_available())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    started = not dist.is_initialized()
    if started:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30),
                                device_id=device if device.type == "cuda" else None)
    check_backend(dist.get_backend(), device)
    ranks = Ranks(dist.get_rank(), dist.get_world_size(), local_rank)
    if started:
        atexit.register(ranks._leave_group)
    threading.Thread(target=ranks._watch_failures, name="rl8lite-failure-watchdog",
                     daemon=True).start()
    return ranks, device

