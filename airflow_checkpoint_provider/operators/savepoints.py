"""Operator disposing savepoints: a retention policy (max age / max count) or given paths."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class DisposeSavepointsOperator(CheckpointBaseOperator):
    """
    Delete savepoints and mark their rows DISCARDED.

    With ``job_name``: apply a retention policy to the savepoints of every job of that name —
    dispose those older than ``max_age_seconds`` and those beyond the newest ``max_count``;
    the newest completed savepoint is always kept, and a savepoint a running job was
    restored from is kept too. With ``paths``: dispose exactly those (a path that is not a
    savepoint, or is still used by a running job, fails the task).

    The return value is the list of disposed locations.

    :param job_name: job name whose savepoints the retention policy applies to. Templated.
    :param max_age_seconds: dispose savepoints completed longer ago than this. Templated.
    :param max_count: keep at most this many of the newest savepoints. Templated.
    :param paths: savepoint directories to dispose. Templated.
    :param checkpoint_conn_id: the metadata DB connection.
    """

    template_fields: Sequence[str] = ("job_name", "paths", "max_age_seconds", "max_count")

    def __init__(self, *, job_name: str | None = None,
                 max_age_seconds: float | str | None = None, max_count: int | str | None = None, paths: Sequence[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if job_name is None and not paths:
            raise ValueError("give job_name (with max_age_seconds and/or max_count) or paths")
        if job_name is not None and max_age_seconds is None and max_count is None:
            raise ValueError("a retention policy needs max_age_seconds and/or max_count")
        self.job_name = job_name
        self.max_age_seconds = max_age_seconds
        self.max_count = max_count
        self.paths = paths

    def execute(self, context: Context) -> list[str]:
        from airflow_checkpoint_provider.engine.client import (
            EngineError,
            apply_savepoint_retention,
            dispose_savepoint,
        )

        store = self.hook.get_conn()
        disposed: list[str] = []
        for path in self.paths or []:
            try:
                dispose_savepoint(path, store)
            except EngineError as exc:
                raise AirflowException(f"cannot dispose {path}: {exc}") from exc
            disposed.append(path)
        if self.job_name:
            disposed += apply_savepoint_retention(
                store, job_name=self.job_name, max_age_seconds=_number(self.max_age_seconds, float),
                max_count=_number(self.max_count, int))
        self.log.info("Disposed %d savepoint(s)%s", len(disposed),
                      "".join(f"\n  {p}" for p in disposed))
        return disposed


def _number(value, kind):
    return None if value in (None, "", "None") else kind(value)
