"""The checks a trainer makes before it runs or evaluates (rl8's), and how eval stats merge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..algorithms import Algorithm


def reduce_eval_stats(collects: list[dict[str, float]]) -> dict[str, float]:
    """Merge the stats of several collects: sums for counts, extremes for min/max,
    episode means weighted by episode counts, plain means otherwise."""
    merged: dict[str, float] = {}
    episodes = [c.get("episodes/count", 0.0) for c in collects]
    total_episodes = sum(episodes)
    for key in collects[0]:
        values = [c[key] for c in collects]
        if key in ("env/steps", "env/resets", "episodes/count", "profiling/collect_ms"):
            merged[key] = float(sum(values))
        elif key.endswith("/min"):
            merged[key] = float(min(values))
        elif key.endswith("/max"):
            merged[key] = float(max(values))
        elif key in ("episodes/return_min",):
            merged[key] = float(min(v for v in values if v == v)) if total_episodes else float("nan")
        elif key in ("episodes/return_max",):
            merged[key] = float(max(v for v in values if v == v)) if total_episodes else float("nan")
        elif key.startswith("episodes/"):
            weighted = sum(v * w for v, w in zip(values, episodes) if w)
            merged[key] = weighted / total_episodes if total_episodes else float("nan")
        else:
            merged[key] = float(sum(values) / len(values))
    return merged


def check_positive_int(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1{' or None' if optional else ''}, received {value!r}")


def check_run_arguments(
    algorithm: Algorithm,
    *,
    steps_per_eval: int | None = None,
    eval_env_config: dict[str, Any] | None = None,
    checkpoint_every: int | None = None,
    keep_checkpoints: int = 3,
) -> None:
    """The checks :meth:`Trainer.run` makes before training (rl8's), as a function.

    Raises:
        ValueError: ``steps_per_eval`` is not a multiple of ``horizons_per_env_reset``
            (when ``> 0``), ``eval_env_config`` is given while ``horizons_per_env_reset < 0``,
            or a count is not a positive int.
    """
    check_positive_int("steps_per_eval", steps_per_eval, optional=True)
    check_positive_int("checkpoint_every", checkpoint_every, optional=True)
    check_positive_int("keep_checkpoints", keep_checkpoints, optional=False)
    k = algorithm.horizons_per_env_reset
    if eval_env_config and k < 0:
        raise ValueError(
            "eval_env_config was given, but horizons_per_env_reset < 0 means the env is"
            " reset only once, so evaluations could never apply it. Set"
            " horizons_per_env_reset > 0 or drop eval_env_config."
        )
    if steps_per_eval and k > 0 and steps_per_eval % k:
        raise ValueError(
            f"steps_per_eval={steps_per_eval} must be a multiple of"
            f" horizons_per_env_reset={k}: evaluation shares the training buffer and"
            " can only start where the env is reset."
        )


def check_eval_allowed(algorithm: Algorithm, collects: int, env_config: dict[str, Any] | None) -> None:
    """An evaluation shares the training buffer, so it may start only where the env resets.

    Raises:
        RuntimeError: ``collects % k != 0`` for ``k = horizons_per_env_reset > 0``.
        ValueError: ``env_config`` given when ``k < 0`` after the first collect (the env
            is never reset again, so it would be ignored).
    """
    k = algorithm.horizons_per_env_reset
    if env_config and k < 0 and collects:
        raise ValueError(
            "eval got an env_config, but horizons_per_env_reset < 0 means the env is"
            " reset only once, at the first collect, so the config would never be"
            " applied. Set horizons_per_env_reset > 0 to evaluate under other configs."
        )
    if k > 0 and collects % k:
        raise RuntimeError(
            f"eval can only be called every horizons_per_env_reset={k} collects"
            f" (now {collects} collects): training and evaluation share one buffer,"
            " and evaluating mid-way would cut the training rollout short."
        )
