"""The trained policy as a ``torch.export`` program that needs neither rl8lite nor the env.

:func:`export_policy` writes two files into a folder: ``policy.pt2`` (the program)
and ``io.json`` (its inputs and outputs, by name). ``rl8lite/_pyfunc_policy.py``
serves them as an MLflow model; :mod:`rl8lite.tracking` packs the three together.

The program's inputs are the observation's leaves as separate tensors (one for a
vector observation; one per key of a dict observation, nested keys joined by
``"."``), then for a recurrent policy its state ``[B, state_size]``, then a bool
scalar ``deterministic``. It returns the actions, and for a recurrent policy the
next state as well.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from ..specs import as_spec_dtype

Policy = Any
from ..algorithms.windowed import windows_seen
from ..specs import Composite, Spec

#: Name of the recurrent state among the served model's inputs and outputs.
STATE_KEY = "recurrent_state"
#: Name of the actions among a recurrent model's outputs.
ACTIONS_KEY = "actions"
#: Name of a vector observation among a recurrent model's inputs.
OBS_KEY = "obs"
PROGRAM_FILE = "policy.pt2"
IO_FILE = "io.json"
IO_FORMAT = "rl8lite-policy"
IO_VERSION = 1


class ExportError(RuntimeError):
    """The policy's model could not be exported (``torch.export`` refused it)."""


def observation_leaves(spec: Spec, _path: str = "") -> list[tuple[str, Spec]]:
    """``(name, leaf spec)`` of every observation entry, nested keys joined by ``"."``.

    Raises:
        ExportError: a key holds a ``"."`` (its name would be ambiguous).
    """
    if not isinstance(spec, Composite):
        return [("", spec)]
    leaves = []
    for key in spec:
        if "." in key:
            raise ExportError(
                f"observation key {_path + key!r} contains '.', which the saved model's input"
                " names use to join nested keys: rename it"
            )
        nested = observation_leaves(spec[key], f"{_path}{key}.")
        leaves.extend((f"{key}.{sub}" if sub else key, leaf) for sub, leaf in nested)
    return leaves


class PolicyProgram(nn.Module):
    """The policy on CPU in eval mode, with flat tensor inputs (see the module docstring)."""

    def __init__(self, policy: Policy, observation_spec: Spec) -> None:
        super().__init__()
        self.policy = copy.deepcopy(policy).cpu().eval()
        # The spec is no module buffer: move its bound tensors too, or a CUDA-trained
        # policy would export cuda constants.
        self.policy.action_spec = policy.action_spec.to("cpu")
        for name in ("observation_spec", "action_spec"):  # what models keep (Model.__init__)
            if getattr(self.policy.model, name, None) is not None:
                setattr(self.policy.model, name, getattr(self.policy.model, name).to("cpu"))
        self.composite = isinstance(observation_spec, Composite)
        self.keys = [name for name, _ in observation_leaves(observation_spec)]

    def _observation(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor | TensorDict:
        if not self.composite:
            return leaves[0]
        obs = TensorDict({}, batch_size=[leaves[0].shape[0]])
        for key, value in zip(self.keys, leaves):
            obs.set(tuple(key.split(".")), value)
        return obs

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        *tensors, deterministic = inputs
        obs = self._observation(tensors[: len(self.keys)])
        if self.policy.recurrent:
            features, _, next_states = self.policy.network(obs, tensors[-1])
        else:
            features, _ = self.policy.network(obs)
        dist = self.policy.distribution(features, obs)
        # Both actions are computed so that one program serves either choice.
        actions = torch.where(deterministic, dist.deterministic_sample(), dist.sample_with_logp()[0])
        actions = as_spec_dtype(actions, self.policy.action_spec)
        return (actions, next_states) if self.policy.recurrent else actions


def _dtype_name(dtype: torch.dtype, what: str = "") -> str:
    """The numpy name of ``dtype`` (the served model speaks numpy)."""
    name = str(dtype).removeprefix("torch.")
    try:
        np.dtype(name)
    except TypeError:
        raise ExportError(f"{what or 'a tensor'} has dtype {dtype}, which numpy has no type for") from None
    return name


def _example_inputs(program: PolicyProgram, observation_spec: Spec, batch_size: int) -> list[torch.Tensor]:
    leaves = [leaf.to("cpu").zero([batch_size]) for _, leaf in observation_leaves(observation_spec)]
    if program.policy.recurrent:
        leaves.append(program.policy.init_states(batch_size))
    return leaves


@contextlib.contextmanager
def _quiet_torch() -> Iterator[io.StringIO]:
    """Hold back what torch.export prints (a partial graph on failure, guard warnings)."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()) as captured:
            yield captured
    finally:
        logger.setLevel(level)
    sys.stderr.write(captured.getvalue())  # reached on success only: nothing is lost


def _export_failure(model_name: str, error: Exception, printed: str) -> str:
    """One line: the model, the user code torch.export stopped at (if it printed it), why."""
    reason = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    where = re.findall(r"# File: (\S+):(\d+) in \w+, code: (.*)", printed)
    at = f" at {Path(where[-1][0]).name}:{where[-1][1]} ({where[-1][2].strip()})" if where else ""
    return f"torch.export could not export {model_name}{at}: {type(error).__name__}: {reason}"


def export_policy(policy: Policy, observation_spec: Spec, folder: str | Path) -> dict[str, Any]:
    """Export ``policy`` with ``torch.export`` into ``folder``; return the I/O description.

    Raises:
        ExportError: ``torch.export`` could not trace the model (its message is kept), or
            the model sees windows of past observations (view requirements).
    """
    windowed = windows_seen(policy.model, observation_spec)
    if windowed:
        raise ExportError(
            f"{windowed}, and the exported program takes one observation per row: it cannot be"
            " exported yet (checkpoints keep the policy)"
        )
    program = PolicyProgram(policy, observation_spec)
    names = [name or OBS_KEY for name, _ in observation_leaves(observation_spec)]
    if program.policy.recurrent:
        if STATE_KEY in names:
            raise ExportError(f"an observation entry is named {STATE_KEY!r}, the recurrent state's name")
        names.append(STATE_KEY)
    example = _example_inputs(program, observation_spec, batch_size=2)
    batch = torch.export.Dim("batch", min=1)
    # forward(*inputs) has one (variadic) argument: its shapes are one tuple.
    dynamic_shapes = [{0: batch} for _ in example] + [None]
    try:
        with torch.no_grad(), _quiet_torch() as chatter, warnings.catch_warnings():
            # rl8-style models cache their values in an attribute for value_function(); the
            # adapter reads it in the same call, so the traced program does not depend on it.
            warnings.filterwarnings("ignore", message=r"The tensor attribute .* was assigned during export")
            exported = torch.export.export(
                program, (*example, torch.tensor(True)), dynamic_shapes=(tuple(dynamic_shapes),)
            )
    except Exception as e:  # torch.export raises many types; the message says why
        raise ExportError(_export_failure(type(policy.model).__name__, e, chatter.getvalue())) from e
    # The traced output's dtype and shape, without running the model on made-up inputs.
    outputs = exported.graph.output_node().args[0]
    actions = outputs[0].meta["val"]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        torch.export.save(exported, folder / PROGRAM_FILE)
    except Exception as e:
        raise ExportError(f"torch.export could not save {type(policy.model).__name__}: {type(e).__name__}: {e}") from e
    description = {
        "format": IO_FORMAT,
        "version": IO_VERSION,
        "inputs": [
            {"name": name, "dtype": _dtype_name(t.dtype, f"input {name!r}"), "shape": list(t.shape[1:])}
            for name, t in zip(names, example)
        ],
        "named_inputs": program.composite or program.policy.recurrent,
        "recurrent": program.policy.recurrent,
        "state_name": STATE_KEY if program.policy.recurrent else None,
        "output_names": [ACTIONS_KEY, STATE_KEY] if program.policy.recurrent else None,
        "actions": {"dtype": _dtype_name(actions.dtype, "the actions"), "shape": [int(d) for d in actions.shape[1:]]},
    }
    (folder / IO_FILE).write_text(json.dumps(description, indent=2))
    return description
