"""Hook for the engine's metadata DB: jobs, checkpoints, savepoints and control requests.

This is the control plane between Airflow and running jobs (see ARCHITECTURE.md): Airflow
reads job and checkpoint rows and inserts control requests; the job's coordinator answers
them. It is never Airflow's own database.

Connection (type ``checkpoint_metadata``, default id ``checkpoint_metadata_default``), any of

* extra ``{"url": "sqlite:////data/ckpt/metadata.db"}`` or
  ``{"url": "postgresql+psycopg://user:pw@db:5432/ckpt"}`` (wins when given);
* host holding a full SQLAlchemy URL or an absolute SQLite file path;
* host/port/schema/login/password of a PostgreSQL server, with an optional extra
  ``driver`` (default ``postgresql+psycopg``).

The hook never creates or migrates a DB: a SQLite URL whose file does not exist, a DB
without the schema or at another revision fails at once with a message naming the URL and
the command that fixes it (``ckpt db upgrade --db URL``). Jobs create and upgrade the schema
(``ckpt run``), or an administrator does with ``ckpt db upgrade``. (A ``migrate`` extra of
earlier versions is ignored.)

As an environment variable::

    AIRFLOW_CONN_CHECKPOINT_METADATA_DEFAULT='{"conn_type": "checkpoint_metadata",
        "extra": {"url": "sqlite:////data/ckpt/metadata.db"}}'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException
from sqlalchemy.engine import URL

from airflow_checkpoint_provider import CONNECTION_FIELDS, UI_FIELD_BEHAVIOUR
from airflow_checkpoint_provider.engine.client import (
    CheckpointRecord,
    ControlRequestRecord,
    InvalidNameError,
    JobRecord,
    MetadataStore,
    validate_job_name,
)
from airflow_checkpoint_provider.hooks.secrets import mask_url_secrets
from airflow_checkpoint_provider.ownership import DagAccess

T = TypeVar("T")


def checked_job_ref(value: object, what: str = "job") -> str:
    """``value`` if it can name a job (job id, id prefix or job name: all follow the rule of
    names, matched in full), else :class:`AirflowException`. Operator arguments are templated
    and may come from a DAG run's conf: ``"orders\\n"`` is refused, not looked up."""
    try:
        return validate_job_name(value, what)
    except InvalidNameError as exc:
        raise AirflowException(str(exc)) from exc


class CheckpointMetadataHook(BaseHook):
    """
    Read the metadata DB of checkpointed jobs and submit control requests to running jobs.

    Sync methods return the engine's frozen records (:class:`JobRecord`,
    :class:`CheckpointRecord`, :class:`ControlRequestRecord`). Async methods (``a...``) are
    for triggers and never block the event loop.

    Why ``asyncio.to_thread`` around the engine's synchronous :class:`MetadataStore` rather
    than SQLAlchemy's asyncio engine (aiosqlite / asyncpg): the store is the only code that
    knows the schema, and it carries what makes concurrent access safe — SQLite WAL, busy
    timeout, ``BEGIN IMMEDIATE`` for writers, retries on "database is locked" and on
    PostgreSQL serialization failures. Re-implementing its queries on an async engine would
    fork that knowledge. Every call is one short transaction, so a worker thread per call is
    cheap, and the thread pool bounds the concurrency of many triggers polling at once. The
    store (and its connection pool) is created once per hook, also off the loop.

    :param checkpoint_conn_id: Airflow connection of type ``checkpoint_metadata``.
    :param access: the DAG this hook acts for (:class:`~airflow_checkpoint_provider.ownership.DagAccess`):
        every job it resolves (by id, id prefix or name) must belong to that DAG, to one it
        allows, or to no DAG, else :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`.
        ``None``: no DAG (a hook used outside a DAG, e.g. in a script), every job.
    """

    conn_name_attr = "checkpoint_conn_id"
    default_conn_name = "checkpoint_metadata_default"
    conn_type = "checkpoint_metadata"
    hook_name = "Checkpoint metadata DB"

    # The connection form: declared in get_provider_info() ("conn-fields" and
    # "ui-field-behaviour" of the connection type), which Airflow >= 3.2 reads without
    # importing the hook. The two methods below give the same form to older Airflows.

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra fields ``url`` and ``driver`` (Airflow < 3.2; needs wtforms)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from wtforms import StringField

        return {name: StringField(field["label"], widget=BS3TextFieldWidget(),
                                  description=field["description"])
                for name, field in CONNECTION_FIELDS.items()}

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabelled and hinted standard fields (Airflow < 3.2)."""
        return UI_FIELD_BEHAVIOUR

    def __init__(self, checkpoint_conn_id: str = default_conn_name, *,
                 access: DagAccess | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpoint_conn_id = checkpoint_conn_id
        self.access = access
        self._store: MetadataStore | None = None

    # -- connection --------------------------------------------------------------------------

    @staticmethod
    def url_from_connection(conn: Any) -> str:
        """The SQLAlchemy URL (or SQLite path) a ``checkpoint_metadata`` connection names."""
        extra = conn.extra_dejson or {}
        if extra.get("url"):
            return str(extra["url"])
        host = conn.host or ""
        if "://" in host or host.startswith("/") or host == ":memory:":
            return host
        if host:
            return URL.create(
                extra.get("driver", "postgresql+psycopg"), username=conn.login or None,
                password=conn.password or None, host=host, port=conn.port or None,
                database=conn.schema or None,
            ).render_as_string(hide_password=False)
        raise ValueError(
            f"connection {conn.conn_id!r} names no metadata DB: set extra "
            '{"url": "sqlite:////abs/metadata.db"} or a PostgreSQL host/schema'
        )

    def get_url(self) -> str:
        """The connection's URL, registered with Airflow's secret masker (its password and
        the URL itself never appear in a task log)."""
        url = self.url_from_connection(self.get_connection(self.checkpoint_conn_id))
        mask_url_secrets(url)
        return url

    def get_conn(self) -> MetadataStore:
        """The engine's :class:`MetadataStore` for this connection (created once). Never runs
        DDL: raises :class:`MetadataSchemaError` (naming the URL and ``ckpt db upgrade``) for
        a missing SQLite file or a schema not at this package's revision."""
        if self._store is None:
            conn = self.get_connection(self.checkpoint_conn_id)
            url = self.url_from_connection(conn)
            mask_url_secrets(url)
            self._store = MetadataStore(url, migrate=False)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- sync access -------------------------------------------------------------------------

    def check_owned(self, job: JobRecord, what: str = "act on") -> JobRecord:
        """``job`` if this hook's DAG may act on it (see ``access``), else
        :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`."""
        return job if self.access is None else self.access.check(job, what)

    def resolve_job(self, job: str) -> JobRecord:
        """A job by id, id prefix or name (the active job of that name, else the newest).
        Raises ``LookupError``; an argument that cannot be a job reference raises
        :class:`AirflowException`; a job of another DAG raises
        :class:`~airflow_checkpoint_provider.ownership.JobOwnershipError`."""
        return self.check_owned(self.get_conn().resolve_job(checked_job_ref(job)))

    def find_job(self, job: str) -> JobRecord | None:
        try:
            return self.resolve_job(job)
        except LookupError:
            return None

    def list_jobs(self, job_name: str | None = None) -> list[JobRecord]:
        """Jobs (newest first), all of them: callers check the one they act on."""
        if job_name is not None:
            checked_job_ref(job_name, "job name")
        return self.get_conn().list_jobs(job_name=job_name)

    def check_name_owned(self, job_name: str, what: str = "act on") -> None:
        """Refuse a job name whose jobs belong to a DAG this hook may not act on (a name is
        a path to a job's checkpoints, savepoints and output: no sharing across DAGs)."""
        if self.access is None:
            return
        for job in self.list_jobs(job_name):
            self.access.check(job, what)

    def list_checkpoints(self, job_id: str, *, kind: str | None = None,
                         status: str | None = None) -> list[CheckpointRecord]:
        return self.get_conn().list_checkpoints(job_id, kind=kind, status=status)

    def latest_completed_checkpoint(self, *, job_id: str | None = None,
                                    job_name: str | None = None,
                                    kind: str | None = "CHECKPOINT") -> CheckpointRecord | None:
        if job_name is not None:
            checked_job_ref(job_name, "job name")
        rec = self.get_conn().latest_completed_checkpoint(job_id=job_id, job_name=job_name,
                                                          kind=kind)
        if rec is not None and self.access is not None:
            owner = self.get_conn().get_job(rec.job_id)
            if owner is not None:
                self.access.check(owner, "read the checkpoints of")
        return rec

    def submit_control_request(self, job_id: str, action: str, params: dict | None = None, *,
                               idempotency_key: str | None = None) -> str:
        return self.get_conn().submit_control_request(job_id, action, params or {},
                                                      idempotency_key=idempotency_key)

    def get_control_request(self, request_id: str) -> ControlRequestRecord | None:
        return self.get_conn().get_control_request(request_id)

    # -- async access (triggers) -------------------------------------------------------------

    async def aget_conn(self) -> MetadataStore:
        if self._store is None:
            conn = await self.aget_connection(self.checkpoint_conn_id)
            url = self.url_from_connection(conn)
            # opening runs the schema check: off the loop too; never DDL (see get_conn)
            self._store = await asyncio.to_thread(MetadataStore, url, migrate=False)
        return self._store

    async def arun(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(store, *args, **kwargs)`` in a worker thread and await its result."""
        store = await self.aget_conn()
        return await asyncio.to_thread(fn, store, *args, **kwargs)

    async def aget_job(self, job_id: str) -> JobRecord | None:
        job = await self.arun(MetadataStore.get_job, job_id)
        return None if job is None else self.check_owned(job)

    async def aresolve_job(self, job: str) -> JobRecord:
        return self.check_owned(await self.arun(MetadataStore.resolve_job, job))

    async def alist_checkpoints(self, job_id: str, *, kind: str | None = None,
                                status: str | None = None) -> list[CheckpointRecord]:
        return await self.arun(MetadataStore.list_checkpoints, job_id, kind=kind, status=status)

    async def aget_control_request(self, request_id: str) -> ControlRequestRecord | None:
        return await self.arun(MetadataStore.get_control_request, request_id)

    async def aclose(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await asyncio.to_thread(store.close)
