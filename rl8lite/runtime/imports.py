"""Classes by dotted path: how configs and checkpoints name classes without pickling them."""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

#: Modules that moved: a dotted path an older checkpoint or config names still imports.
MOVED_MODULES = {
    "rl8lite.models.mlp": "rl8lite.models.default",
    "rl8lite.models.lstm": "rl8lite.models.default",
    "rl8lite.models._base": "rl8lite.models.base",
    "rl8lite.algorithm": "rl8lite.algorithms",
    "rl8lite.config": "rl8lite.algorithms",
    "rl8lite.policy": "rl8lite.algorithms",
    "rl8lite.trainer": "rl8lite.trainers",
    "rl8lite.train_config": "rl8lite.trainers",
    "rl8lite.env.dummy": "rl8lite.env",
}


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the candidate closest to ``name``, case aside, or ``""``."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def package_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``"unknown"``."""
    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def qualified_name(obj: Any) -> str:
    """``module.QualName`` of a class (or of an instance's class)."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def dotted_path(cls: type) -> str:
    """``"module.QualName"`` of a class or function; an ``ImportError`` where it does not import
    back (defined in a function or ``__main__``)."""
    if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        raise ImportError(f"{cls.__qualname__} (in {cls.__module__}) cannot be imported by dotted"
                          " path; define it at module level in an importable module")
    return f"{cls.__module__}.{cls.__qualname__}"


def import_dotted_path(path: str, *, what: str = "dotted path") -> Any:
    """The object named ``"package.module.Name"`` or ``"package.module:Name"`` (modules in
    :data:`MOVED_MODULES` under their new names); an ``ImportError`` naming ``what`` if none.

    Examples:
        >>> import_dotted_path("rl8lite.env.DiscreteDummyEnv").__name__
        'DiscreteDummyEnv'
        >>> import_dotted_path("torch.optim:SGD").__name__
        'SGD'
    """
    dotted = isinstance(path, str) and re.fullmatch(r"[\w.]+(:[\w.]+)?", path) is not None
    if not dotted or "." not in path.replace(":", "."):
        raise ImportError(f"{what} {path!r} is not a dotted path (expected 'package.module.Name'"
                          " or 'package.module:Name')")
    located = next((new + path[len(old):] for old, new in MOVED_MODULES.items()
                    if path.startswith((f"{old}.", f"{old}:"))), path)
    if ":" in located:
        module_name, attributes = located.split(":")
        candidates = [(module_name, attributes.split("."))]
    else:
        parts = located.split(".")
        candidates = [(".".join(parts[:i]), parts[i:]) for i in range(len(parts) - 1, 0, -1)]
    missing: ModuleNotFoundError | None = None
    for module_name, attributes in candidates:
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            # only a missing prefix of the path means "try a shorter module"
            if e.name is not None and f"{module_name}.".startswith(f"{e.name}."):
                missing = missing or e
                continue
            raise ImportError(f"cannot import {what} {path!r}: {e}") from e
        except Exception as e:  # any failure inside the user's module
            raise ImportError(f"cannot import {what} {path!r}: {type(e).__name__}: {e}") from e
        for i, name in enumerate(attributes):
            try:
                obj = getattr(obj, name)
            except AttributeError:
                owner = ".".join([module_name, *attributes[:i]])
                # a class for a class: CartPole, not the module cartpole, for 'Cartpole'
                hint = did_you_mean(name, [n for n in dir(obj) if n[:1] != "_"
                                           and n[:1].isupper() == name[:1].isupper()])
                reason = (missing if missing and i == 0 else
                          f"{owner!r} has no attribute {name!r}{hint}")
                raise ImportError(f"cannot import {what} {path!r}: {reason}") from None
        return obj
    raise ImportError(f"cannot import {what} {path!r}: {missing}")
