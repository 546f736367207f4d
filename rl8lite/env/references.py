"""How configs and checkpoints name an env class: its dotted path, or the options
:func:`~rl8lite.env.gymnasium_env` made it from (``"gymnasium:Acrobot-v1"``,
``{"gymnasium": "Acrobot-v1", ...}``, ``{"gymnasium_factory": "package.module.function", ...}``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..runtime.imports import dotted_path, import_dotted_path, qualified_name
from .gymnasium import GymnasiumEnv, gymnasium_env


def env_reference(env_cls: type) -> str | dict[str, Any]:
    """The name :func:`import_env_class` imports ``env_cls`` back from (an ``ImportError``
    where there is none).

    Examples:
        >>> from rl8lite.env import DiscreteDummyEnv, gymnasium_env
        >>> env_reference(DiscreteDummyEnv)
        'rl8lite.env.base.DiscreteDummyEnv'
        >>> env_reference(gymnasium_env("CartPole-v1", vectorization_mode="async"))
        {'gymnasium': 'CartPole-v1', 'vectorization_mode': 'async'}
    """
    if isinstance(env_cls, type) and issubclass(env_cls, GymnasiumEnv):
        if env_cls.reference is None:
            raise ImportError(f"the Gymnasium env class {env_cls.__name__} cannot be named in a"
                              " config or checkpoint: make it from an env id or a module-level"
                              " factory, with plain-data keywords (numbers, strings, lists, dicts)")
        return dict(env_cls.reference)
    return dotted_path(env_cls)


def env_label(env_cls: type) -> str:
    """``env_cls``'s reference as one string, for experiment tracking (never raises).

    Examples:
        >>> from rl8lite.env import gymnasium_env
        >>> env_label(gymnasium_env("CartPole-v1"))
        "{'gymnasium': 'CartPole-v1', 'vectorization_mode': 'sync'}"
    """
    if isinstance(env_cls, type) and issubclass(env_cls, GymnasiumEnv):
        return env_cls.label
    return qualified_name(env_cls)


def import_env_class(reference: str | Mapping[str, Any], *, what: str = "env_cls") -> Any:
    """The env class ``reference`` names (see the module docstring): an ``ImportError`` where
    none imports, a ``TypeError`` for a mapping without one ``"gymnasium"``/``"gymnasium_factory"``.

    Examples:
        >>> import_env_class("rl8lite.env.DiscreteDummyEnv").__name__
        'DiscreteDummyEnv'
        >>> CartPole = import_env_class("gymnasium:CartPole-v1")
        >>> import_env_class({"gymnasium": "CartPole-v1"}) is CartPole
        True
    """
    if isinstance(reference, str) and reference.startswith("gymnasium:"):
        return gymnasium_env(reference.removeprefix("gymnasium:"))
    if not isinstance(reference, Mapping):
        return import_dotted_path(reference, what=what)
    options = dict(reference)
    kinds = [k for k in ("gymnasium", "gymnasium_factory") if k in options]
    if len(kinds) != 1:
        raise TypeError("a Gymnasium env mapping needs exactly one of 'gymnasium' (an env id)"
                        " and 'gymnasium_factory' (a factory's dotted path), received keys"
                        f" {sorted(options)}")
    source = options.pop(kinds[0])
    if kinds[0] == "gymnasium_factory":
        source = import_dotted_path(source, what="gymnasium_factory")
    return gymnasium_env(source, **options)
