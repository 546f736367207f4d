"""The trained policy as a ``torch.export`` program, alone, as an MLflow model (served by
``_pyfunc_policy.py``) or as ONNX, needing neither rl8lite nor the env."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn

from ..algorithms.windowed import windows_seen
from ..specs import Composite, Spec, spec_leaves

STATE_KEY = "recurrent_state"
ACTIONS_KEY = "actions"
OBS_KEY = "obs"  # a vector observation's input name
PROGRAM_FILE = "policy.pt2"
IO_FILE = "io.json"


class ExportError(RuntimeError):
    """The policy could not be exported (the message says why)."""


class PolicyProgram(nn.Module):
    """The policy on CPU in eval mode: the observation's leaves ``[B, ...]`` (``input_names``), a
    recurrent state and (``sampling``) a bool ``deterministic`` to the actions (and next state)."""

    def __init__(self, policy: Any, observation_spec: Spec, *, sampling: bool = True) -> None:
        super().__init__()
        if windowed := windows_seen(policy.model, observation_spec):
            raise ExportError(f"{windowed}, and the exported program takes one observation per"
                              " row: it cannot be exported yet (checkpoints keep the policy)")
        #: Whether the program takes ``deterministic`` and can sample (else: deterministic only).
        self.sampling = sampling
        self.policy = copy.deepcopy(policy).cpu().eval()
        # Specs are no buffers: move their tensors too, or a CUDA policy exports CUDA constants.
        self.policy.action_spec = policy.action_spec.to("cpu")
        for name in ("observation_spec", "action_spec"):
            if getattr(self.policy.model, name, None) is not None:
                setattr(self.policy.model, name, getattr(self.policy.model, name).to("cpu"))
        self.observation_spec = observation_spec.to("cpu")
        self.composite = isinstance(observation_spec, Composite)
        #: Every observation leaf, and those the program takes: the actor's (``obs_groups``).
        self.leaves = spec_leaves(self.observation_spec)
        actor = (getattr(self.policy.model, "obs_groups", None) or {}).get("actor")
        self.paths = [path for path, _ in self.leaves if actor is None or path[0] in actor]
        names = [".".join(path) for path in self.paths]
        if dotted := [name for path, name in zip(self.paths, names) if "." in "".join(path)]:
            raise ExportError(f"observation key {dotted[0]!r} contains '.', which the saved model's"
                              " input names use to join nested keys: rename it")
        self.recurrent = bool(self.policy.recurrent)
        self.input_names = [name or OBS_KEY for name in names] + [STATE_KEY] * self.recurrent
        if self.recurrent and STATE_KEY in names:
            raise ExportError(f"an observation entry is named {STATE_KEY!r}, the state's name")

    def example_inputs(self, batch_size: int) -> list[torch.Tensor]:
        """Zeros of the tensor inputs."""
        leaves = [leaf.zero([batch_size]) for path, leaf in self.leaves if path in self.paths]
        return leaves + ([self.policy.init_states(batch_size)] if self.recurrent else [])

    def dynamic_inputs(self) -> tuple[list[torch.Tensor], tuple[dict[int, Any], ...]]:
        """Zeros of the tensor inputs for two rows, and their batch dimension (any size)."""
        example, batch = self.example_inputs(2), torch.export.Dim("batch", min=1)
        return example, tuple({0: batch} for _ in example)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        *tensors, deterministic = inputs if self.sampling else (*inputs, None)
        obs: torch.Tensor | TensorDict = tensors[0]
        if self.composite:  # the critic's own entries as zeros: the actor never reads them
            obs = TensorDict({}, batch_size=[obs.shape[0]])
            given = dict(zip(self.paths, tensors))  # the state, last, has no path
            for path, leaf in self.leaves:
                obs.set(path, given[path] if path in given else torch.zeros(
                    obs.batch_size[0], *leaf.shape, dtype=leaf.dtype))
        obs = self.policy.normalize(obs)
        if self.recurrent:
            features, _, next_states = self.policy.network(obs, tensors[-1])
        else:
            features, _ = self.policy.network(obs)
        dist = self.policy.distribution(features, obs)
        actions = dist.deterministic_sample()
        if self.sampling:  # both actions are computed, so that one program serves either choice
            actions = torch.where(deterministic, actions, dist.sample_with_logp()[0])
        dtype = getattr(self.policy.action_spec, "dtype", None) or actions.dtype
        return (actions.to(dtype), next_states) if self.recurrent else actions.to(dtype)

    def io_description(self, actions: torch.Tensor) -> dict[str, Any]:
        """``io.json``: the inputs and outputs by name, dtype and shape (no batch)."""
        inputs = zip(self.input_names, self.example_inputs(1))
        return {
            "format": "rl8lite-policy", "version": 1,
            "inputs": [{"name": name, **_tensor_spec(t, f"input {name!r}")} for name, t in inputs],
            "named_inputs": self.composite or self.recurrent, "recurrent": self.recurrent,
            "state_name": STATE_KEY if self.recurrent else None,
            "output_names": [ACTIONS_KEY, STATE_KEY] if self.recurrent else None,
            "actions": _tensor_spec(actions, "the actions"),
        }


def export_onnx(policy: Any, observation_spec: Spec, path: str | Path) -> Path:
    """Export ``policy``'s deterministic actions, observation normalisation included, as an ONNX
    model at ``path`` (the ``onnx`` extra), inputs and outputs named as :class:`PolicyProgram`'s
    (``next_recurrent_state`` for the state it returns). An :class:`ExportError` if it cannot be
    exported or onnxruntime disagrees with the policy (beyond 1e-5) on random observations."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ImportError("ONNX export needs the onnx extra: pip install 'rl8lite[onnx]'") from e
    program = PolicyProgram(policy, observation_spec, sampling=False)
    example, shapes = program.dynamic_inputs()
    outputs = [ACTIONS_KEY, f"next_{STATE_KEY}"] if program.recurrent else [ACTIONS_KEY]
    path, model_name = Path(path), type(policy.model).__name__
    with (_exporting("torch.onnx", model_name), contextlib.redirect_stdout(io.StringIO()),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        exported = torch.onnx.export(program, tuple(example), dynamo=True, dynamic_shapes=(shapes,),
                                     input_names=program.input_names, output_names=outputs)
        path.parent.mkdir(parents=True, exist_ok=True)
        exported.save(str(path))
    inputs = [leaf.rand([64]) for path, leaf in program.leaves if path in program.paths]
    if program.recurrent:
        inputs.append(torch.randn(program.example_inputs(64)[-1].shape,
                                  generator=torch.Generator().manual_seed(0)))
    with torch.no_grad():
        expected = program(*inputs)
    got = onnxruntime.InferenceSession(str(path)).run(
        None, {name: t.numpy() for name, t in zip(program.input_names, inputs)})
    for name, want, have in zip(outputs, torch.utils._pytree.tree_leaves(expected), got):
        if not np.allclose(have, want.numpy(), rtol=1e-5, atol=1e-5):
            path.unlink()
            raise ExportError(f"the ONNX model of {model_name} disagrees with the policy on"
                              f" {name!r} (max difference {np.abs(have - want.numpy()).max()})")
    return path


def export_policy(policy: Any, observation_spec: Spec, folder: str | Path) -> dict[str, Any]:
    """Export ``policy`` into ``folder`` (``policy.pt2``, ``io.json``); return ``io.json``."""
    program = PolicyProgram(policy, observation_spec)
    example, shapes = program.dynamic_inputs()
    model_name = type(policy.model).__name__
    with _exporting("torch.export", model_name):
        # forward(*inputs) has one (variadic) argument: its shapes are one tuple
        exported = torch.export.export(program, (*example, torch.tensor(True)),
                                       dynamic_shapes=((*shapes, None),))
    description = program.io_description(exported.graph.output_node().args[0][0].meta["val"])
    Path(folder).mkdir(parents=True, exist_ok=True)
    with _exporting("torch.export", model_name):
        torch.export.save(exported, Path(folder, PROGRAM_FILE))
    Path(folder, IO_FILE).write_text(json.dumps(description, indent=2))
    return description


def _tensor_spec(tensor: torch.Tensor, what: str) -> dict[str, Any]:
    """The numpy dtype and the shape past the batch."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    try:
        np.dtype(dtype)
    except TypeError:
        raise ExportError(f"{what} has dtype {tensor.dtype}, which numpy has no type for") from None
    return {"dtype": dtype, "shape": [int(d) for d in tensor.shape[1:]]}


@contextlib.contextmanager
def _exporting(tool: str, model_name: str) -> Iterator[None]:
    """Quiet torch while exporting (shown on success); a failure: ExportError naming its line."""
    logger, printed = logging.getLogger("torch"), io.StringIO()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with torch.no_grad(), contextlib.redirect_stderr(printed), warnings.catch_warnings():
            # rl8-style models cache values for value_function(); the program never reads them
            warnings.filterwarnings("ignore", message=r"The tensor attribute .* was assigned")
            yield
    except Exception as e:  # torch raises many types; the message says why
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        where = re.findall(r"# File: (\S+):(\d+) in \w+, code: (.*)", printed.getvalue())[-1:]
        at = "".join(f" at {Path(file).name}:{line} ({code.strip()})" for file, line, code in where)
        raise ExportError(f"{tool} could not export {model_name}{at}: {type(e).__name__}:"
                          f" {reason}") from e
    finally:
        logger.setLevel(level)
    sys.stderr.write(printed.getvalue())


def save_policy_model(policy: Any, observation_spec: Spec, path: str | Path) -> None:
    """Save ``policy`` as an MLflow model in folder ``path``, which loads without rl8lite (an
    :class:`ExportError` where it cannot be exported).

    Examples:
        >>> import mlflow.pyfunc
        >>> from rl8lite import Algorithm
        >>> from rl8lite.examples import CartPole
        >>> algo = Algorithm(CartPole, num_envs=2, horizon=2)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save_policy_model(algo.policy, algo.env.observation_spec, f"{tmp}/policy")
        ...     mlflow.pyfunc.load_model(f"{tmp}/policy").predict(np.zeros((3, 4))).shape
        (3, 1)
    """
    import mlflow.pyfunc
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.pyfunc.save_model(str(path), **_model_arguments(policy, observation_spec, tmp))


def log_policy_model(run_id: str, policy: Any, observation_spec: Spec, *, name: str, step: int,
                     registered_model_name: str | None = None) -> Any:
    """Log ``policy`` as a LoggedModel of run ``run_id`` (in MLflow's current store) linked to its
    metrics at ``step`` (registered as ``registered_model_name``); return its ``ModelInfo``."""
    import mlflow.pyfunc
    from mlflow.models import Model
    with tempfile.TemporaryDirectory() as tmp:
        return Model.log(artifact_path=None, name=name, flavor=mlflow.pyfunc, run_id=run_id,
                         step=step, registered_model_name=registered_model_name,
                         **_model_arguments(policy, observation_spec, tmp))


def _model_arguments(policy: Any, observation_spec: Spec, folder: str) -> dict[str, Any]:
    """``mlflow.pyfunc``'s arguments for the policy exported into ``folder`` (inputs undeclared)."""
    import mlflow
    from mlflow.models import ModelSignature
    from mlflow.types import ParamSchema, ParamSpec, Schema, TensorSpec
    desc = export_policy(policy, observation_spec, folder)
    specs = zip([desc["actions"], desc["inputs"][-1]], desc["output_names"] or [None])
    outputs = [TensorSpec(np.dtype(s["dtype"]), (-1, *s["shape"]), name) for s, name in specs]
    example = {s["name"]: np.zeros((2, *s["shape"]), dtype=s["dtype"]) for s in desc["inputs"]}
    return {
        "python_model": str(Path(__file__).with_name("_pyfunc_policy.py")),
        "artifacts": {"program": str(Path(folder, PROGRAM_FILE)), "io": str(Path(folder, IO_FILE))},
        "signature": ModelSignature(outputs=Schema(outputs), params=ParamSchema(
            [ParamSpec("deterministic", "boolean", True)])),
        "input_example": example if desc["named_inputs"] else next(iter(example.values())),
        # explicit: inferring them costs seconds
        "pip_requirements": [f"mlflow=={mlflow.__version__}", f"numpy=={np.__version__}",
                             f"torch=={torch.__version__.split('+')[0]}"],
    }


def log_onnx_model(run_id: str, policy: Any, observation_spec: Spec, *, name: str,
                   step: int) -> Any:
    """Log :func:`export_onnx`'s model as an MLflow ONNX LoggedModel of run ``run_id``."""
    import mlflow.onnx
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        model = onnx.load(str(export_onnx(policy, observation_spec, Path(tmp, "policy.onnx"))))
        active = mlflow.active_run()
        ours = active is not None and active.info.run_id == run_id
        with contextlib.nullcontext() if ours else mlflow.start_run(run_id=run_id):
            return mlflow.onnx.log_model(model, name=name, step=step)
