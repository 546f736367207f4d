"""``TrainConfig``: a trainer described by a YAML or JSON file (rl8's), checked when read."""

from __future__ import annotations

import dataclasses
import json
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..algorithms import Algorithm, AlgorithmConfig, RecurrentAlgorithmConfig
from ..algorithms.config import unknown_fields
from ..env import Env, import_env_class
from ..runtime.imports import import_dotted_path
from .checkpoints import CLASS_FIELDS
from .trainer import Trainer


class TrainConfigError(ValueError):
    """A train config file or its contents are malformed; the message names the culprit."""


class UnknownFieldError(TrainConfigError, TypeError):
    """An unknown ``algorithm_config`` field (also a ``TypeError``, as in ``Algorithm``)."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``3e-4`` (no dot) as a string; read it as a float, as YAML 1.2 and JSON do."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


@dataclass
class TrainConfig:
    """A trainer's config (rl8's): the env class and the algorithm's hyperparameters, checked and
    imported at construction (errors name the culprit).

    Args:
        env_cls: The env class, its dotted path (``"package.module.Name"`` or
            ``"package.module:Name"``), or a Gymnasium env: ``"gymnasium:<env id>"`` or a mapping
            of :func:`~rl8lite.env.gymnasium_env`'s arguments (``{"gymnasium": <env id>, ...}``).
        algorithm_config: :class:`~rl8lite.AlgorithmConfig` fields (classes may be dotted paths).
        recurrent: Build a :class:`~rl8lite.RecurrentAlgorithm`.

    Examples:
        >>> from rl8lite import TrainConfig
        >>> config = TrainConfig("rl8lite.env.DiscreteDummyEnv", {"num_envs": 8, "horizon": 4})
        >>> config.build_algorithm().hparams.horizon
        4
    """

    env_cls: type[Env] | str | Mapping[str, Any]
    algorithm_config: dict[str, Any] = field(default_factory=dict)
    recurrent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.recurrent, bool):
            raise TrainConfigError(f"recurrent must be true or false, received {self.recurrent!r}")
        reference = self.env_cls if isinstance(self.env_cls, (str, Mapping)) else None
        if reference is not None:
            try:
                self.env_cls = import_env_class(reference, what="env_cls")
            except (TypeError, ValueError) as e:  # a malformed Gymnasium env mapping or option
                raise TrainConfigError(f"env_cls {reference!r}: {e}") from e
        _check_env_cls(self.env_cls, reference)
        if not isinstance(self.algorithm_config, Mapping | None):
            raise TrainConfigError("algorithm_config must be a mapping of AlgorithmConfig fields,"
                                   f" received {self.algorithm_config!r}")
        values = self.algorithm_config = dict(self.algorithm_config or {})
        config_cls = RecurrentAlgorithmConfig if self.recurrent else AlgorithmConfig
        names = [f.name for f in dataclasses.fields(config_cls)]
        if unknown := [key for key in values if key not in names]:
            fields = unknown_fields(unknown, names)
            raise UnknownFieldError(f"unknown algorithm_config field(s) {fields}")
        for name in CLASS_FIELDS:
            if isinstance(value := values.get(name), str):
                values[name] = import_dotted_path(value, what=f"algorithm_config.{name}")
        self.to_algorithm_config().validate()

    def to_algorithm_config(self) -> AlgorithmConfig:
        """The (recurrent) :class:`~rl8lite.AlgorithmConfig` of ``algorithm_config``."""
        config_cls = RecurrentAlgorithmConfig if self.recurrent else AlgorithmConfig
        return config_cls(**self.algorithm_config)

    def build_algorithm(self) -> Algorithm:
        """The :class:`~rl8lite.Algorithm` (env, policy, buffer) of this config."""
        return self.to_algorithm_config().build(self.env_cls)  # type: ignore[arg-type]

    def build(self, *, experiment_name: str | None = None, **trainer_options: Any) -> Trainer:
        """A :class:`~rl8lite.Trainer` of this config (``trainer_options``: its other keywords)."""
        return Trainer(self.build_algorithm(), experiment_name=experiment_name, **trainer_options)

    @classmethod
    def from_file(cls, path: str | Path) -> TrainConfig:
        """Read a train config from a ``.yaml``/``.yml`` or ``.json`` file; errors name the file."""
        p = Path(path)
        data = read_mapping(p)
        if unknown := sorted(set(data) - {f.name for f in dataclasses.fields(cls)}):
            raise TrainConfigError(f"{p}: unknown key(s) {unknown}; a train config has env_cls,"
                                   " algorithm_config and recurrent")
        if data.get("env_cls") is None:
            raise TrainConfigError(f"{p}: missing env_cls, the env class's dotted path"
                                   " (for example 'rl8lite.env.DiscreteDummyEnv')")
        try:
            return cls(**data)
        except (ValueError, TypeError, ImportError, NotImplementedError) as e:
            raise type(e)(f"{p}: {e}") from e


def _check_env_cls(env_cls: Any, reference: str | Mapping[str, Any] | None) -> None:
    """``env_cls`` (imported from ``reference``, if given) must be a concrete :class:`Env`."""
    named = f"env_cls {reference!r}" if reference is not None else "env_cls"
    if not (isinstance(env_cls, type) and issubclass(env_cls, Env)):
        expected = "name a subclass of rl8lite.Env" if reference is not None else (
            "be a subclass of rl8lite.Env or its dotted path")
        raise TrainConfigError(f"{named} must {expected}, received {_describe(env_cls)}")
    if missing := sorted(getattr(env_cls, "__abstractmethods__", ())):
        named = named if reference is not None else f"env_cls {_describe(env_cls)}"
        raise TrainConfigError(f"{named} cannot be instantiated: it does not implement the"
                               f" abstract method(s) {', '.join(missing)}")


def _describe(obj: Any) -> str:
    """``class pkg.mod.Name``, ``function pkg.mod.name``, ``module pkg.mod`` or ``int 5``."""
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    qualname, module = getattr(obj, "__qualname__", None), getattr(obj, "__module__", None)
    if isinstance(qualname, str) and isinstance(module, str):
        kind = "class" if isinstance(obj, type) else type(obj).__name__
        return f"{kind} {module}.{qualname}"
    return f"{type(obj).__name__} {obj!r}"


def read_mapping(p: Path) -> dict[str, Any]:
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise TrainConfigError(f"{p}: a train config must be a .yaml, .yml or .json file")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such config file")
    raw = p.read_bytes()
    try:  # newlines translated as read_text() does
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise TrainConfigError(f"{p}: not UTF-8 text: byte {raw[e.start]:#04x} on line {line}"
                               f" ({e.reason}); save it as UTF-8") from None
    try:
        data = json.loads(text) if suffix == ".json" else yaml.load(text, Loader=_Loader)
    except json.JSONDecodeError as e:
        raise TrainConfigError(f"{p} is not valid JSON: {e}") from None
    except (yaml.YAMLError, ValueError) as e:  # ValueError: a value like the date 2024-13-01
        problem = " ".join(str(e).split())
        if (mark := getattr(e, "problem_mark", None)) is not None:
            problem = f"{e.problem} (line {mark.line + 1}, column {mark.column + 1})"
        raise TrainConfigError(f"{p} is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        received = type(data).__name__ if data is not None else "an empty file"
        raise TrainConfigError(f"{p} must hold a mapping with env_cls and algorithm_config,"
                               f" received {received}")
    return data


__all__ = ["CLASS_FIELDS", "TrainConfig", "TrainConfigError", "UnknownFieldError",
           "import_dotted_path"]
