"""Runners by name: the layer between the DSL and the runners.

``Pipeline.run(runner="spark", **options)`` asks :func:`create_runner` for the runner
called ``"spark"``; the DSL never imports a runner. The built-in runners are imported when
first asked for (``local`` loads no Spark), and :func:`register_runner` adds another one.
Import edges run downward only: datastream -> execution -> runners (tests/unit/architecture/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .errors import ConfigurationError
from .plan.graph import ExecutionGraph
from .plan.job import JobConfig, JobResult, Restore


class Runner(Protocol):
    """What a runner offers the DSL: run an execution graph with a job config. ``restore``
    is a :class:`~.plan.job.Restore` (``Pipeline.run`` parsed its text form)."""

    def run(
        self,
        graph: ExecutionGraph,
        config: JobConfig,
        *,
        restore: Restore,
        allow_non_restored_state: bool,
        job_id: str | None,
        claim_mode: str = ...,
        trust_snapshot: bool = ...,
    ) -> JobResult: ...


def _local(**options: Any) -> Runner:
    from .runners.local import LocalRunner

    return LocalRunner(**options)


def _spark(**options: Any) -> Runner:
    from .runners.spark.runner import SparkRunner

    return SparkRunner(**options)


_RUNNERS: dict[str, Callable[..., Runner]] = {"local": _local, "spark": _spark}


def register_runner(name: str, factory: Callable[..., Runner]) -> None:
    """Make ``Pipeline.run(runner=name, **options)`` run with ``factory(**options)``."""
    _RUNNERS[name] = factory


def runner_names() -> list[str]:
    return sorted(_RUNNERS)


def create_runner(name: str, **options: Any) -> Runner:
    """The runner called ``name``, built with ``options`` (:meth:`Pipeline.run` documents
    the options of ``local`` and ``spark``)."""
    factory = _RUNNERS.get(name)
    if factory is None:
        names = " or ".join(repr(n) for n in runner_names())
        raise ConfigurationError(f"runner {name!r} is unknown; use {names}")
    return factory(**options)
