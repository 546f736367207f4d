"""The PPO update: ``num_sgd_iters`` passes of minibatch SGD on the buffer, no host read inside."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..data import DataKeys
from ..nn.ppo import PPOLosses, ppo_loss
from ..runtime.distributed import Ranks
from .buffer import UpdateBatch, index_dtype
from .compiled_step import CompiledMinibatchStep
from .config import AlgorithmConfig
from .data_parallel import GradientAverager, WholeBatch
from .rollout import NonFiniteError

Evaluate = Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
#: Columns of the update's table: the ``PPOLosses`` fields.
STATS = PPOLosses._fields
LOSS_OPTIONS = ("clip_param", "dual_clip_param", "vf_clip_param", "vf_coeff", "vf_loss")


@dataclass
class UpdateResult:
    """Sample-weighted means of the losses and monitors, passes taken, mean gradient norm."""

    means: dict[str, float]
    passes: int
    grad_norm: float


def total_grad_norm(grads: list[torch.Tensor], *, device: Any = None) -> torch.Tensor:
    """The L2 norm of all ``grads`` together (0-d), by foreach kernels where it can."""
    if not grads:
        return torch.zeros((), device=device)
    if any(g.device != grads[0].device or g.dtype != grads[0].dtype for g in grads):
        return torch.nn.utils.get_total_norm(grads, foreach=True)
    # ||g|| = || (||g_1||, ..., ||g_k||) ||
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def clip_grads_to_norm_(params: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """Scale gradients in place by ``min(1, max_norm / (norm + 1e-6))``, as torch's clip does."""
    grads = [p.grad for p in params if p.grad is not None]
    if any(g.device != grads[0].device or g.dtype != grads[0].dtype for g in grads):
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    elif grads:
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp_(max=1.0))


class PPOUpdate:
    """``num_sgd_iters`` passes of minibatch SGD on the PPO loss, in chunks of ``chunk_samples``."""

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter],
                 evaluate: Evaluate, *, unit_length: int, hparams: AlgorithmConfig,
                 device: torch.device, chunk_samples: int | None,
                 ranks: Ranks | None = None) -> None:
        self.optimizer, self.params, self.evaluate = optimizer, params, evaluate
        self.unit_length, self.hparams, self.device = unit_length, hparams, device
        self.chunk_samples, self.ranks = chunk_samples, ranks or Ranks()
        self.whole_batch = WholeBatch(self.ranks)
        distributed = self.ranks.distributed
        self.average_gradients = GradientAverager(params, self.ranks) if distributed else None
        amp_on_cuda = hparams.enable_amp and device.type == "cuda"
        self.grad_scaler = torch.amp.GradScaler("cuda") if amp_on_cuda else None
        # fused Adam/AdamW skip a step on the device when told a value is non-finite
        fused = any(group.get("fused") for group in optimizer.param_groups)
        self.skips_on_device = self.grad_scaler is None and fused
        # tensors, so that compiled or captured code reads their current values
        self.coeff = torch.zeros((), device=device)
        self.advantage_normalization = torch.zeros((), device=device), torch.ones((), device=device)
        #: Set on the device at a pass's first non-finite loss (0) or gradient norm (1).
        self.failed = torch.zeros(2, dtype=torch.bool, device=device)
        self.found_inf = torch.zeros((), device=device)
        eager = self.chunk_losses_eager
        # the loss compiles; the backward stays eager (dynamo cannot trace a recurrent model's)
        self.chunk_losses = torch.compile(eager) if hparams.compile is True else eager
        self.step_fn: Callable[..., torch.Tensor] = self.minibatch_step
        #: Called with each optimizer step's mean KL when ``desired_kl`` is set (the lr's rule).
        self.adapt_lr: Callable[[float], None] = lambda kl_div: None

    @property
    def whole_step_compiled(self) -> bool:
        return isinstance(self.step_fn, CompiledMinibatchStep)

    def compile_whole_step(self, policy: torch.nn.Module) -> None:
        """Take each minibatch step as one compiled graph, the step so far its fallback."""
        self.step_fn = CompiledMinibatchStep(
            policy, self.optimizer, self.chunk_losses_eager, coeff=self.coeff, failed=self.failed,
            max_grad_norm=self.hparams.max_grad_norm, fallback=self.step_fn)

    def run(self, batch: UpdateBatch, entropy_coeff: float) -> UpdateResult:
        """The passes over ``batch``, stopped once a pass's mean KL exceeds 1.5 target_kl_div."""
        hp, unit = self.hparams, self.unit_length
        size = hp.num_envs * hp.horizon // unit  # update units: time steps or sequences
        minibatch = (hp.sgd_minibatch_size or hp.num_envs * hp.horizon) // unit
        chunk = max(1, (self.chunk_samples or minibatch * unit) // unit)
        self.coeff.fill_(entropy_coeff)
        if batch.advantage_normalization is not None:  # into the tensors a captured step reads
            for static, value in zip(self.advantage_normalization, batch.advantage_normalization):
                static.copy_(value)
            batch.advantage_normalization = self.advantage_normalization
        chunks = sum(math.ceil(min(minibatch, size - m) / chunk) for m in range(0, size, minibatch))
        table = torch.empty(hp.num_sgd_iters * chunks, len(STATS), device=self.device,
                            dtype=torch.float64)
        accumulate = hp.accumulate_grads
        # a pass of one optimizer step takes the mean gradient of every sample: no shuffle
        shuffle = hp.shuffle_minibatches and not accumulate and size > minibatch
        dtype = index_dtype(hp.num_envs * (hp.horizon + 1))
        order = torch.arange(size, device=self.device, dtype=dtype)  # shuffled in place each pass
        counts: list[int] = []
        norms: list[torch.Tensor] = []
        for passes in range(1, hp.num_sgd_iters + 1):
            if shuffle:
                torch.randperm(size, out=order)
            pass_start = first = len(counts)
            if accumulate:
                self.zero_grad()
            for mb_start in range(0, size, minibatch):
                units = order[mb_start : mb_start + minibatch]
                mb_size = units.shape[0]
                if not accumulate:
                    first = len(counts)
                if not accumulate and mb_size <= chunk:  # the whole step in one function
                    norms.append(self.step_fn(batch, units, table[len(counts)]))
                    counts.append(mb_size * unit)
                else:
                    if not accumulate:
                        self.zero_grad()
                    for c_start in range(0, mb_size, chunk):
                        c_units = units[c_start : c_start + chunk]
                        share = c_units.shape[0] / (size if accumulate else mb_size)
                        self.accumulate(batch, c_units, table[len(counts)], share)
                        counts.append(c_units.shape[0] * unit)
                    if not accumulate:
                        norms.append(self.apply_gradients(table[first : len(counts), 0]))
                if not accumulate and hp.desired_kl is not None:
                    self.adapt_lr(self._mean_kl(table[first : len(counts)], counts[first:]))
            if accumulate:
                norms.append(self.apply_gradients(table[first : len(counts), 0]))
                if hp.desired_kl is not None:
                    self.adapt_lr(self._mean_kl(table[first : len(counts)], counts[first:]))
            self._raise_if_failed()
            if hp.target_kl_div is not None and self._mean_kl(  # early stop on the pass's KL
                    table[pass_start : len(counts)], counts[pass_start:]) > 1.5 * hp.target_kl_div:
                break
        grad_norm = float(torch.stack(norms).mean()) if norms else 0.0
        sums = self.whole_batch.sums(self._weighted_sums(table[: len(counts)], counts))
        samples = float(sum(counts) * self.ranks.world_size)
        means = {name: float(total / samples) for name, total in zip(STATS, sums)}
        return UpdateResult(means, passes, grad_norm)

    def minibatch_step(self, batch: UpdateBatch, units: torch.Tensor,
                       row: torch.Tensor) -> torch.Tensor:
        """One optimizer step on ``units``; losses into ``row``; returns the gradient norm."""
        self.zero_grad()
        self.accumulate(batch, units, row, 1.0)
        return self.apply_gradients(row[:1])

    def accumulate(self, batch: UpdateBatch, units: torch.Tensor, row: torch.Tensor,
                   share: float) -> None:
        """Add the gradient of one chunk's loss, weighted by its ``share`` of the step's samples."""
        total, row[:] = self.chunk_losses(batch.gather(units), self.coeff)
        loss = total if share == 1 else total * share
        (self.grad_scaler.scale(loss) if self.grad_scaler is not None else loss).backward()

    def chunk_losses_eager(self, chunk: dict[str, Any],
                           entropy_coeff: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(total loss, report)`` of one chunk: the loss to differentiate, and its losses and
        monitors recomputed in float64 (a mean near zero is a difference of large terms)."""
        options = {name: getattr(self.hparams, name) for name in LOSS_OPTIONS}  # read per step
        with self.autocast():
            logp, entropy, values = self.evaluate(chunk)
            inputs = {"logp": logp.float(), "old_logp": chunk[DataKeys.LOGP].reshape(-1, 1),
                      "advantages": chunk[DataKeys.ADVANTAGES].reshape(-1, 1),
                      "values": values.float(), "old_values": chunk[DataKeys.VALUES].reshape(-1, 1),
                      "returns": chunk[DataKeys.RETURNS].reshape(-1, 1), "entropy": entropy.float()}
            total = ppo_loss(**inputs, entropy_coeff=entropy_coeff, **options).total
        with torch.no_grad():
            wide = {name: x.detach().double() for name, x in inputs.items()}
            report = torch.stack(ppo_loss(**wide, entropy_coeff=entropy_coeff.double(), **options))
        return total, report

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def apply_gradients(self, losses: torch.Tensor) -> torch.Tensor:
        """Average over ranks, skip from a non-finite loss or gradient on, clip, step; the norm."""
        if self.average_gradients is not None:  # every rank's loss: every rank decides alike
            losses = self.average_gradients(losses.sum()).reshape(1)
        params = [p for p in self.params if p.grad is not None]
        if self.grad_scaler is not None:
            self.grad_scaler.unscale_(self.optimizer)
        norm = total_grad_norm([p.grad for p in params], device=self.device)
        if self.skips_on_device:
            # the loss is fp32 even under autocast; fp16 gradients are the grad scaler's business
            self.failed[0] |= ~torch.isfinite(losses).all()
            self.failed[1] |= ~torch.isfinite(norm)
            self.found_inf.copy_(self.failed.any())
            self.optimizer.found_inf = self.found_inf  # read by fused Adam/AdamW's step
        else:
            checked = losses if self.grad_scaler is not None else torch.cat([losses, norm[None]])
            if not bool(torch.isfinite(checked).all()):
                self.failed[0] = not bool(torch.isfinite(losses).all())
                self.failed[1] = True
                self._raise_if_failed()
        if self.hparams.max_grad_norm is not None:
            clip_grads_to_norm_(params, self.hparams.max_grad_norm, norm)
        if self.grad_scaler is not None:
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            self.optimizer.step()
        return norm.detach()

    def _raise_if_failed(self) -> None:
        loss, grads = self.failed.tolist()
        if not (loss or grads):
            return
        self.failed.zero_()
        self.found_inf.zero_()
        what = ("non-finite loss (NaN or Inf) in the policy update: the returns, values, advantages"
                " or log-probabilities hold NaN/Inf" if loss else "non-finite gradient norm (NaN or"
                " Inf) in the policy update, with a finite loss: the model's backward overflowed")
        raise NonFiniteError(f"{what}. No optimizer step was taken from that minibatch on"
                             " (earlier ones were).")

    def recompute_old_logp(self, batch: UpdateBatch) -> None:
        """Recompute the buffer's log-probabilities under autocast (the PPO ratio starts at 1)."""
        hp, unit = self.hparams, self.unit_length
        size = hp.num_envs * hp.horizon // unit
        chunk = max(1, (self.chunk_samples or size * unit) // unit)
        dtype = index_dtype(hp.num_envs * (hp.horizon + 1))
        logp_rows = batch.rows[DataKeys.LOGP]
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices), self.autocast():
            for units in torch.arange(size, device=self.device, dtype=dtype).split(chunk):
                logp = self.evaluate(batch.gather(units))[0]
                logp_rows[batch.unit_rows(units).reshape(-1)] = logp.float().reshape(-1, 1)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 (CPU) or fp16 (CUDA) autocast with ``enable_amp``, else nothing."""
        if not self.hparams.enable_amp:
            return contextlib.nullcontext()
        dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype)

    def _mean_kl(self, rows: torch.Tensor, counts: list[int]) -> float:
        """The mean approximate KL of the samples of ``rows`` (chunk means), over every rank."""
        kl_sums = self._weighted_sums(rows, counts)[STATS.index("kl_div")]
        (kl_sum,) = self.whole_batch.sums([kl_sums])
        return kl_sum / (sum(counts) * self.ranks.world_size)

    def _weighted_sums(self, stats: torch.Tensor, counts: list[int]) -> list[float]:
        """``sum_chunks count * stat`` per stat (float64), from ``[chunks, stats]`` chunk means."""
        return (torch.tensor(counts, dtype=torch.float64, device=self.device) @ stats).tolist()
