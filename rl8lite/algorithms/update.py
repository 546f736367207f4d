"""The PPO update: minibatch SGD passes over the buffer, in chunks, with optional AMP."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..data import DataKeys
from ..runtime.distributed import Ranks
from .checks import NonFiniteError
from .chunks import index_dtype
from .config import AlgorithmConfig
from .data_parallel import GradientAverager, WholeBatch
from .gradients import clip_grads_to_norm_, total_grad_norm
from .losses import PPOLosses, ppo_losses
from .update_batch import UpdateBatch

Evaluate = Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class UpdateResult:
    """What one update did: sample-weighted means of its losses and monitors."""

    #: ``PPOLosses`` field -> mean over every sample of every pass taken.
    means: dict[str, float]
    #: Passes over the buffer taken (fewer than ``num_sgd_iters`` after a KL early stop).
    passes: int
    #: Mean gradient norm over the optimizer steps (before clipping).
    grad_norm: float


class PPOUpdate:
    """``num_sgd_iters`` passes of minibatch SGD on the PPO loss.

    A minibatch's gradient is the mean over its samples; it is computed in chunks of
    at most ``chunk_samples`` samples, each chunk's loss weighted by its share, so
    chunking never changes the update.

    Args:
        optimizer: Steps the policy's parameters.
        params: The policy's parameters (listed once: ``Module.parameters()`` walks the
            module tree, ~20 µs, on every call).
        evaluate: ``(logp, entropy, values)`` of a chunk of update units under the policy.
        unit_length: Time steps per update unit (1, or ``seq_len`` for sequences).
        hparams: The algorithm's config.
        device: The algorithm's device.
        chunk_samples: Largest number of samples per forward/backward (``None``: whole minibatches).
        ranks: The training processes: with several, each optimizer step averages the
            gradient over them, and the KL early stop and the reported means cover every
            rank's samples (default: this process alone).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        evaluate: Evaluate,
        *,
        unit_length: int,
        hparams: AlgorithmConfig,
        device: torch.device,
        chunk_samples: int | None,
        ranks: Ranks | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.ranks = ranks or Ranks()
        self.whole_batch = WholeBatch(self.ranks)
        self.average_gradients = GradientAverager(params, self.ranks) if self.ranks.distributed else None
        self.params = params
        self.evaluate = evaluate
        self.unit_length = unit_length
        self.hparams = hparams
        self.device = device
        self.chunk_samples = chunk_samples
        self.grad_scaler = (
            torch.amp.GradScaler("cuda") if hparams.enable_amp and device.type == "cuda" else None
        )
        self.chunk_losses = torch.compile(self.chunk_losses_eager) if hparams.compile else self.chunk_losses_eager

    def run(self, batch: UpdateBatch, entropy_coeff: float) -> UpdateResult:
        """The passes over ``batch``; early stop once a pass's mean KL exceeds ``1.5 * target_kl_div``."""
        hp, unit = self.hparams, self.unit_length
        # A unit is one time step (feedforward) or one sequence of seq_len steps (recurrent).
        size = hp.num_envs * hp.horizon // unit
        minibatch = (hp.sgd_minibatch_size or hp.num_envs * hp.horizon) // unit
        chunk = max(1, (self.chunk_samples or minibatch * unit) // unit)
        # A tensor, so that a compiled loss is not recompiled when the schedule moves it.
        coeff = torch.tensor(entropy_coeff, device=self.device)
        # Per chunk: its losses and monitors stacked into a row of a preallocated table (one
        # op; no small tensor per chunk that outlives the chunk and fragments the heap), and
        # its sample count; summed sample-weighted once at the end.
        chunks_per_pass = sum(
            math.ceil(min(minibatch, size - mb_start) / chunk) for mb_start in range(0, size, minibatch)
        )
        table = torch.empty(
            hp.num_sgd_iters * chunks_per_pass, len(PPOLosses._fields), device=self.device, dtype=torch.float64
        )
        # A pass that takes one optimizer step (one minibatch, or accumulated gradients)
        # steps on the mean gradient of every sample: their order cannot change it (beyond
        # float rounding), so no permutation is drawn, and no index of every unit is held.
        steps_per_pass = 1 if hp.accumulate_grads else math.ceil(size / minibatch)
        shuffle = hp.shuffle_minibatches and steps_per_pass > 1
        counts: list[int] = []
        grad_norms: list[torch.Tensor] = []
        passes = 0
        # One shuffled index for every pass, redrawn in place (not a new one allocated
        # while the last is alive).
        order = torch.empty(size, device=self.device, dtype=self.index_dtype) if shuffle else None
        for _ in range(hp.num_sgd_iters):
            if order is not None:
                torch.randperm(size, out=order)
            pass_start = len(counts)
            if hp.accumulate_grads:
                self.optimizer.zero_grad(set_to_none=True)
                step_start = len(counts)
            for mb_start in range(0, size, minibatch):
                mb_size = min(minibatch, size - mb_start)
                if not hp.accumulate_grads:
                    self.optimizer.zero_grad(set_to_none=True)
                    step_start = len(counts)
                denominator = size if hp.accumulate_grads else mb_size
                for c_start in range(mb_start, mb_start + mb_size, chunk):
                    c_end = min(c_start + chunk, mb_start + mb_size)
                    units = order[c_start:c_end] if order is not None else torch.arange(
                        c_start, c_end, device=self.device, dtype=self.index_dtype
                    )
                    total, table[len(counts)] = self.chunk_losses(batch.gather(units), coeff)
                    share = (c_end - c_start) / denominator
                    self._backward(total if share == 1 else total * share)
                    counts.append((c_end - c_start) * unit)
                if not hp.accumulate_grads:
                    grad_norms.append(self._optimizer_step(table[step_start : len(counts), 0]))
            if hp.accumulate_grads:
                grad_norms.append(self._optimizer_step(table[step_start : len(counts), 0]))
            passes += 1
            if hp.target_kl_div is not None:
                kl_index = PPOLosses._fields.index("kl_div")
                pass_sums = self._weighted_sums(table[pass_start : len(counts)], counts[pass_start:])
                (kl_sum,) = self.whole_batch.sums([pass_sums[kl_index]])
                if kl_sum / (size * unit * self.ranks.world_size) > 1.5 * hp.target_kl_div:
                    break
        grad_norm = float(torch.stack(grad_norms).mean()) if grad_norms else 0.0
        sums = self.whole_batch.sums(self._weighted_sums(table[: len(counts)], counts))
        samples = float(sum(counts) * self.ranks.world_size)
        means = {name: float(total / samples) for name, total in zip(PPOLosses._fields, sums)}
        return UpdateResult(means, passes, grad_norm)

    def recompute_old_logp(self, batch: UpdateBatch) -> None:
        """Recompute the buffer's log-probabilities as the update will, under autocast.

        The collect samples in fp32. A Gaussian's log-probability at a bf16/fp16 mean is off
        by ~|mean| * 2^-8 / sigma standard deviations, far beyond the clip range once sigma
        is small, so the PPO ratio would not start at 1 (measured 0.66-1.64 on Pendulum
        with sigma = 0.018 under bf16). The random stream is left as it was.
        """
        hp, unit = self.hparams, self.unit_length
        size = hp.num_envs * hp.horizon // unit
        chunk = max(1, (self.chunk_samples or size * unit) // unit)
        logp_rows = batch.rows[DataKeys.LOGP]
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices), self.autocast():
            for start in range(0, size, chunk):
                units = torch.arange(start, min(start + chunk, size), device=self.device, dtype=self.index_dtype)
                logp = self.evaluate(batch.gather(units))[0]
                logp_rows[batch.unit_rows(units).reshape(-1)] = logp.float().reshape(-1, 1)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """bf16 (CPU) or fp16 (CUDA) autocast with ``enable_amp``, else nothing."""
        if not self.hparams.enable_amp:
            return contextlib.nullcontext()
        dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype)

    def chunk_losses_eager(self, chunk: dict[str, Any], entropy_coeff: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(total loss, report)`` of one chunk (what ``compile=True`` compiles, forward and
        backward): the fp32 loss the gradient is taken of, and its losses and monitors
        recomputed in float64 from the same inputs, one row of the update's table.

        The report is float64 because a reported mean near zero (the policy loss: advantages
        normalised to mean 0 make it ~1e-8 on a pass's first minibatch) is a difference of
        large terms: float32 sums over 64 and over 2048 samples left accumulated minibatches
        and one whole-buffer step 20-40% apart, float64 sums agree to ~1e-16 (rl8's test
        compares them at rel 1e-5)."""
        hp = self.hparams
        with self.autocast():
            logp, entropy, values = self.evaluate(chunk)
            inputs = {
                "logp": logp.float(), "old_logp": chunk[DataKeys.LOGP].reshape(-1, 1),
                "advantages": chunk[DataKeys.ADVANTAGES].reshape(-1, 1), "values": values.float(),
                "old_values": chunk[DataKeys.VALUES].reshape(-1, 1), "returns": chunk[DataKeys.RETURNS].reshape(-1, 1),
                "entropy": entropy.float(),
            }
            options = {"clip_param": hp.clip_param, "dual_clip_param": hp.dual_clip_param,
                       "vf_clip_param": hp.vf_clip_param, "vf_coeff": hp.vf_coeff, "vf_loss": hp.vf_loss}
            total = ppo_losses(**inputs, entropy_coeff=entropy_coeff, **options).total
        with torch.no_grad():
            wide = {name: x.detach().double() for name, x in inputs.items()}
            report = torch.stack(ppo_losses(**wide, entropy_coeff=entropy_coeff.double(), **options))
        return total, report

    @property
    def index_dtype(self) -> torch.dtype:
        """dtype of the update's unit indices: int32 where every buffer row (``< N * (T + 1)``) fits."""
        return index_dtype(self.hparams.num_envs * (self.hparams.horizon + 1))

    def _weighted_sums(self, stats: torch.Tensor, counts: list[int]) -> list[float]:
        """``sum_chunks count * stat`` per stat (float64), from ``[chunks, stats]`` chunk means."""
        weights = torch.tensor(counts, dtype=torch.float64, device=self.device)
        return (weights @ stats).tolist()

    def _backward(self, loss: torch.Tensor) -> None:
        if self.grad_scaler is not None:
            self.grad_scaler.scale(loss).backward()
        else:
            loss.backward()

    def _optimizer_step(self, chunk_losses: torch.Tensor) -> torch.Tensor:
        """Clip gradients, refuse a non-finite loss or gradient (parameters stay intact), step.

        ``chunk_losses``: the total loss of every chunk whose gradient this step takes.
        """
        if self.average_gradients is not None:
            # Every rank's loss, so every rank takes the same decision below.
            chunk_losses = self.average_gradients(chunk_losses.sum()).reshape(1)
        params = [p for p in self.params if p.grad is not None]
        if self.grad_scaler is not None:
            self.grad_scaler.unscale_(self.optimizer)
        norm = total_grad_norm([p.grad for p in params], device=self.device)
        # One host read per step. The loss is fp32 (even under autocast) and must be finite;
        # non-finite fp16 gradients are the grad scaler's business (it skips the step).
        checked = chunk_losses if self.grad_scaler is not None else torch.cat([chunk_losses, norm.reshape(1)])
        if not bool(torch.isfinite(checked).all()):
            if not bool(torch.isfinite(chunk_losses).all()):
                raise NonFiniteError(
                    "non-finite loss (NaN or Inf) in the policy update: the returns, values,"
                    " advantages or log-probabilities hold NaN/Inf. This optimizer step was not"
                    " taken (earlier minibatches of this update were)."
                )
            raise NonFiniteError(
                "non-finite gradient norm (NaN or Inf) in the policy update, with a finite"
                " loss: the model's backward pass overflowed. This optimizer step was not"
                " taken (earlier minibatches of this update were)."
            )
        if self.hparams.max_grad_norm is not None:
            clip_grads_to_norm_(params, self.hparams.max_grad_norm, norm)
        if self.grad_scaler is not None:
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            self.optimizer.step()
        return norm.detach()
