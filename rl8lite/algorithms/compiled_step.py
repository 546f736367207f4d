"""The update's minibatch step compiled whole on a CPU: gather, forward and backward, clip and the
Adam/AdamW step into the optimizer's state, with no host read (a few fused loops)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

ADAMS = (torch.optim.Adam, torch.optim.AdamW)
#: ``compile="auto"`` compiles the whole step once a run has planned this many optimizer steps, so
#: a short run never pays the compile (8-17 s); a count, not a timing: runs are reproducible.
AUTO_COMPILE_AFTER_STEPS = 20_000


def whole_step_unsupported(hparams: Any, device: torch.device, recurrent: bool, windowed: bool,
                           distributed: bool, optimizer: torch.optim.Optimizer) -> str | None:
    """Why the whole minibatch step cannot be compiled, or ``None``."""
    if type(optimizer) not in ADAMS:
        return "an optimizer other than Adam/AdamW"
    group = optimizer.param_groups[0]
    reasons = {
        "not a CPU device": device.type != "cpu",
        "a recurrent policy": recurrent,
        "a policy with view windows": windowed,
        "several processes": distributed,
        "mixed precision": hparams.enable_amp,
        "accumulate_grads": hparams.accumulate_grads,
        "several parameter groups": len(optimizer.param_groups) != 1,
        "amsgrad, maximize or a differentiable optimizer": any(
            group.get(name) for name in ("amsgrad", "maximize", "differentiable")),
        "a tensor learning rate or betas": any(
            isinstance(x, Tensor) for x in (group["lr"], *group["betas"]))}
    return next((reason for reason, applies in reasons.items() if applies), None)


def adam_update(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: Tensor,
                *, lr: Tensor, beta1: float, beta2: float, eps: float, weight_decay: float,
                decoupled: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One ``torch.optim.Adam`` (``decoupled``: AdamW) step: ``(param, exp_avg, exp_avg_sq, step)``.

        m_t = beta1 m + (1 - beta1) g,   v_t = beta2 v + (1 - beta2) g^2
        p_t = p - lr / (1 - beta1^t) * m_t / (sqrt(v_t) / sqrt(1 - beta2^t) + eps)

    with ``g += weight_decay p`` (Adam) or ``p *= 1 - lr weight_decay`` first (AdamW)."""
    if weight_decay and decoupled:
        param = param * (1 - lr * weight_decay).float()
    elif weight_decay:
        grad = grad + weight_decay * param
    step = step + 1
    exp_avg = torch.lerp(exp_avg, grad, 1 - beta1)
    exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    t = step.double()  # the bias corrections in double precision, as torch's Python scalars
    step_size = (lr / (1 - beta1**t)).float()
    correction2_sqrt = (1 - beta2**t).sqrt().float()
    param = param - step_size * exp_avg / (exp_avg_sq.sqrt() / correction2_sqrt + eps)
    return param, exp_avg, exp_avg_sq, step


class _Losses(nn.Module):
    """The policy as a submodule: ``functional_call`` swaps its parameters while ``losses`` runs."""

    def __init__(self, policy: nn.Module, losses: Callable[..., tuple[Tensor, Tensor]]) -> None:
        super().__init__()
        self.policy, self.losses = policy, losses

    def forward(self, chunk: dict[str, Any], coeff: Tensor) -> tuple[Tensor, Tensor]:
        return self.losses(chunk, coeff)


class CompiledMinibatchStep:
    """A ``PPOUpdate`` minibatch step, ``(batch, units, row) -> gradient norm``, compiled whole. A
    non-finite loss or norm sets ``failed`` and freezes the parameters (as fused Adam skips); a
    model that cannot compile whole warns at the first call, and ``fallback`` takes every step."""

    def __init__(self, policy: nn.Module, optimizer: torch.optim.Optimizer,
                 losses: Callable[..., tuple[Tensor, Tensor]], *, coeff: Tensor, failed: Tensor,
                 max_grad_norm: float | None, fallback: Callable[..., Tensor]) -> None:
        self.optimizer, self.coeff, self.failed = optimizer, coeff, failed
        self.fallback, self.compiled_once, self.max_grad_norm = fallback, False, max_grad_norm
        self.module = _Losses(policy, losses)
        self.named = [(f"policy.{name}", p) for name, p in policy.named_parameters()]
        self.lr = torch.zeros((), dtype=torch.float64)
        self._inputs_for: Any = None  # the update's batch the inputs were read for
        self._inputs: tuple[Any, ...] = ()
        self.compiled: Callable[..., Tensor] | None = torch.compile(self._step, fullgraph=True)

    def _state(self, params: list[Tensor]) -> tuple[list[Tensor], ...]:
        """The optimizer's state tensors, created as ``torch.optim.Adam`` does on first use."""
        state = self.optimizer.state
        for p in params:
            if not state[p]:
                state[p].update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(p),
                                exp_avg_sq=torch.zeros_like(p))
        return tuple([state[p][key] for p in params] for key in ("exp_avg", "exp_avg_sq", "step"))

    def _optimizer_inputs(self) -> tuple[Any, ...]:
        """Parameters, options and state as the optimizer's step reads them; lr into a tensor."""
        group = self.optimizer.param_groups[0]
        self.lr.fill_(group["lr"])
        options = {"beta1": float(group["betas"][0]), "beta2": float(group["betas"][1]),
                   "eps": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                   "decoupled": isinstance(self.optimizer, torch.optim.AdamW)}
        # frozen parameters are neither differentiated nor stepped, as in the eager update
        names, params = zip(*[(name, p) for name, p in self.named if p.requires_grad])
        return names, list(params), options, *self._state(params)

    def __call__(self, batch: Any, units: Tensor, row: Tensor) -> Tensor:
        if self.compiled is None:
            return self.fallback(batch, units, row)
        if batch is not self._inputs_for:  # a new update
            self._inputs_for, self._inputs = batch, self._optimizer_inputs()
        try:
            with torch.no_grad():  # torch.func.grad differentiates inside; nothing else records
                norm = self.compiled(batch, units, row, *self._inputs)
        except Exception as e:  # only the first call compiles; later errors are the step's own
            if self.compiled_once:
                raise
            self.compiled = None
            warnings.warn(f"the update's minibatch step did not compile as one graph"
                          f" ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''});"
                          " it runs as before", RuntimeWarning, stacklevel=2)
            return self.fallback(batch, units, row)
        self.compiled_once = True
        return norm

    def _step(self, batch: Any, units: Tensor, row: Tensor, names: tuple[str, ...],
              params: list[Tensor], options: dict[str, Any], exp_avgs: list[Tensor],
              exp_avg_sqs: list[Tensor], steps: list[Tensor]) -> Tensor:
        chunk = batch.gather(units)

        def total_loss(params: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
            return torch.func.functional_call(self.module, params, (chunk, self.coeff))

        grads, report = torch.func.grad(total_loss, has_aux=True)(dict(zip(names, params)))
        grads = [grads[name] for name in names]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        self.failed[0] |= ~torch.isfinite(report[0])
        self.failed[1] |= ~torch.isfinite(norm)
        ok = ~self.failed.any()
        if self.max_grad_norm is not None:  # as torch.nn.utils.clip_grad_norm_
            scale = (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)
            grads = [g * scale for g in grads]
        for param, grad, m, v, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            new = adam_update(param, grad, m, v, step, lr=self.lr, **options)
            for old, value in zip((param, m, v, step), new):
                old.copy_(torch.where(ok, value, old))
        row.copy_(report)
        return norm
