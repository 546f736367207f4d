"""``TrainConfig``: a trainer described by a YAML or JSON file (rl8's).

A file names the env class by dotted path and gives :class:`~rl8lite.AlgorithmConfig`
fields under ``algorithm_config``:

.. code-block:: yaml

    env_cls: rl8lite.examples.CartPole        # or "rl8lite.examples:CartPole"
    algorithm_config:
      num_envs: 64
      horizon: 32
      optimizer_cls: torch.optim.Adam         # model_cls, distribution_cls too
      optimizer_config: {lr: 3e-3}
      seed: 0

A Gymnasium env is named ``env_cls: gymnasium:Acrobot-v1``, or with options as a
mapping of :func:`~rl8lite.env.gymnasium_env`'s arguments:

.. code-block:: yaml

    env_cls:
      gymnasium: Acrobot-v1                   # or gymnasium_factory: package.module:make_env
      vectorization_mode: async
      max_episode_steps: 300                  # any other key: a gymnasium.make keyword

Every problem (an unreadable file, a missing ``env_cls``, a path that does not
import, an unknown or out-of-range field) is found when the file is read,
before any env or MLflow run is created, and named in the error.
"""

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

from ..algorithms import Algorithm
from ..algorithms.config import (
    AlgorithmConfig,
    RecurrentAlgorithmConfig,
    config_fields,
    unknown_fields,
)
from ..env import Env, import_env_class
from ..runtime.imports import import_dotted_path
from .trainer import Trainer

#: ``algorithm_config`` fields that may be given as dotted paths.
CLASS_FIELDS = ("model_cls", "distribution_cls", "optimizer_cls")


class TrainConfigError(ValueError):
    """A train config file or its contents are malformed; the message names the culprit."""


class UnknownFieldError(TrainConfigError, TypeError):
    """``algorithm_config`` names a field :class:`~rl8lite.AlgorithmConfig` lacks.

    Also a ``TypeError``, like an unknown keyword of :class:`~rl8lite.Algorithm`.
    """


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``3e-4`` (no dot) as a string; read it as a float, as YAML 1.2 and JSON do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass
class TrainConfig:
    """A trainer built from a config: env class, algorithm hyperparameters (rl8's).

    Dotted paths are imported, and every field is checked, at construction, so
    a bad config fails before any env or MLflow run exists.

    Args:
        env_cls: The env class, its dotted path (``"package.module.Name"`` or
            ``"package.module:Name"``), or a Gymnasium env: ``"gymnasium:<env id>"`` or a
            mapping of :func:`~rl8lite.env.gymnasium_env`'s arguments (``{"gymnasium":
            <env id>, "vectorization_mode": "async", ...}``).
        algorithm_config: :class:`~rl8lite.AlgorithmConfig` fields;
            ``model_cls``, ``distribution_cls`` and ``optimizer_cls`` may be dotted paths.
        recurrent: Build a :class:`~rl8lite.RecurrentAlgorithm` (``algorithm_config``
            may then also hold ``seq_len`` and ``seqs_per_state_reset``).

    Raises:
        TrainConfigError: A field has the wrong type, or ``env_cls`` is not a
            concrete :class:`~rl8lite.Env` subclass.
        UnknownFieldError: ``algorithm_config`` names an unknown field.
        ImportError: A dotted path does not import.
        ConfigError: A hyperparameter is out of range.

    Examples:
        >>> from rl8lite.train_config import TrainConfig
        >>> config = TrainConfig("rl8lite.env.DiscreteDummyEnv", {"num_envs": 8, "horizon": 4})
        >>> config.build_algorithm().hparams.horizon
        4
        >>> with config.build(progress=False) as trainer:  # doctest: +SKIP
        ...     trainer.step()
    """

    #: The env class (a dotted path or a Gymnasium env's options is imported at construction).
    env_cls: type[Env] | str | Mapping[str, Any]
    #: :class:`~rl8lite.AlgorithmConfig` fields (a copy; dotted paths imported).
    algorithm_config: dict[str, Any] = field(default_factory=dict)
    #: Build a recurrent algorithm (rl8's ``recurrent``).
    recurrent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.recurrent, bool):
            raise TrainConfigError(f"recurrent must be true or false, received {self.recurrent!r}")
        _check_env_cls(self.env_cls)
        if isinstance(self.env_cls, (str, Mapping)):
            reference = self.env_cls
            try:
                self.env_cls = import_env_class(reference, what="env_cls")
            except (TypeError, ValueError) as e:  # a malformed Gymnasium env mapping or option
                raise TrainConfigError(f"env_cls {reference!r}: {e}") from e
            _check_env_cls(self.env_cls, reference)
        if self.algorithm_config is None:
            self.algorithm_config = {}
        if not isinstance(self.algorithm_config, Mapping):
            raise TrainConfigError(
                f"algorithm_config must be a mapping of AlgorithmConfig fields, received"
                f" {self.algorithm_config!r}"
            )
        self.algorithm_config = dict(self.algorithm_config)
        _check_field_names(self.algorithm_config, recurrent=self.recurrent)
        for name in CLASS_FIELDS:
            value = self.algorithm_config.get(name)
            if isinstance(value, str):
                what = f"algorithm_config.{name}"
                self.algorithm_config[name] = import_dotted_path(value, what=what)
        self.to_algorithm_config().validate()

    def to_algorithm_config(self) -> AlgorithmConfig:
        """The (recurrent) :class:`~rl8lite.AlgorithmConfig` of ``algorithm_config``."""
        config_cls = RecurrentAlgorithmConfig if self.recurrent else AlgorithmConfig
        return config_cls(**self.algorithm_config)

    def build_algorithm(self) -> Algorithm:
        """The :class:`~rl8lite.Algorithm` (env, policy, buffer) of this config."""
        return self.to_algorithm_config().build(self.env_cls)  # type: ignore[arg-type]

    def build(self, *, experiment_name: str | None = None, **trainer_options: Any) -> Trainer:
        """A :class:`~rl8lite.Trainer` of this config, logging to its own MLflow run.

        Args:
            experiment_name: MLflow experiment (default: the env class name).
            **trainer_options: Other :class:`~rl8lite.Trainer` keywords
                (``run_name``, ``tags``, ``progress``, ``save_policy``, ``tracker``).
        """
        return Trainer(self.build_algorithm(), experiment_name=experiment_name, **trainer_options)

    @classmethod
    def from_file(cls, path: str | Path) -> TrainConfig:
        """Read a config from a ``.yaml``/``.yml`` or ``.json`` file.

        The file is a mapping with ``env_cls`` (required), ``algorithm_config``
        and ``recurrent``; classes are given as dotted paths. Errors name the file.

        Raises:
            FileNotFoundError: The file does not exist.
            TrainConfigError: It is not valid YAML/JSON, not a mapping, lacks
                ``env_cls``, or has unknown top-level keys (plus the errors of
                :class:`TrainConfig` itself, with the file's name prefixed).

        Examples:
            >>> TrainConfig.from_file("config.yaml").build().run()  # doctest: +SKIP
        """
        p = Path(path)
        data = _read_mapping(p)
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TrainConfigError(
                f"{p}: unknown key(s) {unknown}; a train config has env_cls,"
                " algorithm_config and recurrent"
            )
        if "env_cls" not in data or data["env_cls"] is None:
            raise TrainConfigError(
                f"{p}: missing env_cls, the env class's dotted path"
                " (for example 'rl8lite.env.DiscreteDummyEnv')"
            )
        try:
            return cls(**data)
        except (ValueError, TypeError, ImportError, NotImplementedError) as e:
            raise type(e)(f"{p}: {e}") from e


def _check_env_cls(env_cls: Any, path: str | Mapping[str, Any] | None = None) -> None:
    """``env_cls`` (imported from ``path``, if given) must be a concrete :class:`Env` subclass."""
    if isinstance(env_cls, (str, Mapping)) and path is None:
        return  # a dotted path or a Gymnasium env's options, imported next
    shown = f"env_cls {path!r}" if path is not None else "env_cls"
    if not (isinstance(env_cls, type) and issubclass(env_cls, Env)):
        expected = "must name a subclass of rl8lite.Env" if path is not None else (
            "must be a subclass of rl8lite.Env or its dotted path"
        )
        raise TrainConfigError(f"{shown} {expected}, received {_describe(env_cls)}")
    missing = sorted(getattr(env_cls, "__abstractmethods__", ()))
    if missing:
        if path is None:
            shown = f"env_cls {_describe(env_cls)}"
        raise TrainConfigError(
            f"{shown} cannot be instantiated: it does not implement the abstract method(s)"
            f" {', '.join(missing)}"
        )


def _describe(obj: Any) -> str:
    """``class pkg.mod.Name``, ``function pkg.mod.name`` or ``int 5``, for error messages."""
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if isinstance(qualname, str) and isinstance(module, str):
        kind = "class" if isinstance(obj, type) else type(obj).__name__
        return f"{kind} {module}.{qualname}"
    return f"{type(obj).__name__} {obj!r}"


def _read_mapping(p: Path) -> dict[str, Any]:
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise TrainConfigError(f"{p}: a train config must be a .yaml, .yml or .json file")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such config file")
    raw = p.read_bytes()
    try:
        # newlines translated as read_text() (text mode) does
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise TrainConfigError(
            f"{p}: not UTF-8 text: byte {raw[e.start]:#04x} on line {line} ({e.reason});"
            " save it as UTF-8"
        ) from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TrainConfigError(f"{p} is not valid JSON: {e}") from None
    else:
        try:
            data = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as e:
            raise TrainConfigError(f"{p} is not valid YAML: {_yaml_problem(e)}") from None
        except ValueError as e:  # a value YAML cannot construct, e.g. the date 2024-13-01
            raise TrainConfigError(f"{p} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise TrainConfigError(
            f"{p} must hold a mapping with env_cls and algorithm_config, received"
            f" {type(data).__name__ if data is not None else 'an empty file'}"
        )
    return data


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


def _check_field_names(values: Mapping[str, Any], *, recurrent: bool = False) -> None:
    names = config_fields(RecurrentAlgorithmConfig if recurrent else AlgorithmConfig)
    unknown = [key for key in values if key not in names]
    if unknown:
        fields = unknown_fields(unknown, names)
        raise UnknownFieldError(f"unknown algorithm_config field(s) {fields}")


__all__ = [
    "CLASS_FIELDS",
    "TrainConfig",
    "TrainConfigError",
    "UnknownFieldError",
    "import_dotted_path",
]
