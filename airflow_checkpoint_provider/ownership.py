"""Jobs belong to DAGs: which jobs a task of a DAG may act on.

A job submitted by :class:`~airflow_checkpoint_provider.operators.submit.SubmitCheckpointedJobOperator`
belongs to the task's DAG from its first row on (``jobs.dag_id``, reserved before the job is
launched). Job names are global, and a run's conf may name any job; so every operator,
sensor and trigger that acts on an existing job -- stop, cancel, savepoint, retention, pins,
dispose, verify, promote, the blue-green hand-over, the CDC slot operators -- checks that
the job belongs to its own DAG, or to one the DAG author lists in ``allowed_owner_dags``
(a constructor argument, never templated: a conf value cannot widen it). A job started
outside Airflow (``ckpt run``) belongs to no DAG and stays reachable from every DAG: start
the jobs a DAG steers from that DAG. The ``ckpt`` CLI is the operator's tool and keeps full
access; ``ckpt jobs`` names each job's owner.

The triggerer, the hook, the operators and the sensors share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow.sdk.exceptions import AirflowFailException


class JobOwnershipError(AirflowFailException, PermissionError):
    """A task tried to act on a job that belongs to another DAG. ``.job_id``,
    ``.owner_dag`` and ``.dag_id`` name the job, its DAG and the acting DAG. The task fails
    without retries: another try cannot change who owns the job."""

    def __init__(self, *, job_name: str, job_id: str, owner_dag: str, dag_id: str,
                 what: str = "act on") -> None:
        self.job_id, self.owner_dag, self.dag_id = job_id, owner_dag, dag_id
        super().__init__(
            f"job {job_name!r} belongs to DAG {owner_dag!r}; DAG {dag_id!r} may {what} only "
            f"its own jobs. If this DAG is meant to control that job, its author lists the "
            f"owner in the DAG file: allowed_owner_dags=[{owner_dag!r}]")


def allowed_dags(value: Iterable[str] | None, what: str = "allowed_owner_dags") -> frozenset[str]:
    """``value`` as a frozenset of DAG ids; a single string (e.g. a template) is refused:
    the list is fixed by the DAG author in code."""
    if value is None:
        return frozenset()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of DAG ids written in the DAG file, "
                        f"not {type(value).__name__} {value!r}")
    out = []
    for dag in value:
        if not isinstance(dag, str) or not dag or "{{" in dag:
            raise TypeError(f"{what} holds {dag!r}: each entry must be a DAG id (a literal "
                            "string, not a template)")
        out.append(dag)
    return frozenset(out)


@dataclass(frozen=True)
class DagAccess:
    """What a task of DAG ``dag_id`` may act on: its own jobs, jobs of ``allowed`` DAGs and
    jobs that belong to no DAG."""

    dag_id: str
    allowed: frozenset[str] = frozenset()

    def refusal(self, job: Any, what: str = "act on") -> JobOwnershipError | None:
        """The error for ``job`` (a ``JobRecord``), or ``None`` if this DAG may act on it."""
        owner = getattr(job, "dag_id", None)
        if not owner or owner == self.dag_id or owner in self.allowed:
            return None
        return JobOwnershipError(job_name=job.job_name, job_id=job.job_id, owner_dag=owner,
                                 dag_id=self.dag_id, what=what)

    def check(self, job: Any, what: str = "act on") -> Any:
        """``job`` if this DAG may act on it, else :class:`JobOwnershipError`."""
        error = self.refusal(job, what)
        if error is not None:
            raise error
        return job

    # -- trigger kwargs ---------------------------------------------------------------------

    def serialize(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "allowed": sorted(self.allowed)}

    @classmethod
    def from_kwargs(cls, value: dict[str, Any] | None) -> DagAccess | None:
        if not value:
            return None
        return cls(str(value["dag_id"]), frozenset(value.get("allowed") or ()))


def dag_access(task: Any, allowed_owner_dags: Iterable[str] | None) -> DagAccess | None:
    """The :class:`DagAccess` of an Airflow task's DAG (``None`` for a task outside a DAG)."""
    has_dag = getattr(task, "has_dag", None)
    if has_dag is None or not has_dag():
        return None
    return DagAccess(str(task.dag_id), allowed_dags(allowed_owner_dags))
