"""Operators for PostgreSQL change data capture jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.operators.base import CheckpointBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class DropCdcSlotOperator(CheckpointBaseOperator):
    """
    Drop the replication slot (and publication) of a PostgreSQL CDC job
    (``PostgresCdcSource``), e.g. after the job was cancelled for good, or before a new
    snapshot after DDL. Stop the job first. Returns what was dropped.

    :param job_name: the job whose default slot (``ckpt_<job name>_<hash>``) to drop. Templated.
    :param slot: the slot's name, if the source set ``slot=``. Templated.
    :param publication: the publication to drop too (default: the slot's name; ``""``:
        keep it). Templated.
    :param postgres_conn_id: Airflow connection of the *source* database.
    :param url: or its URL (``postgresql://user@host:port/db``). Templated.
    """

    template_fields: Sequence[str] = ("job_name", "slot", "publication", "url")

    def __init__(self, *, job_name: str | None = None, slot: str | None = None,
                 publication: str | None = None, postgres_conn_id: str | None = None,
                 url: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if (job_name is None) == (slot is None):
            raise ValueError("give job_name or slot")
        if (postgres_conn_id is None) == (url is None):
            raise ValueError("give postgres_conn_id or url")
        self.job_name, self.slot, self.publication = job_name, slot, publication
        self.postgres_conn_id, self.url = postgres_conn_id, url

    def execute(self, context: Context) -> list[str]:
        from airflow_checkpoint_provider.engine.client import (
            EngineError,
            cdc_object_name,
            drop_cdc_slot,
        )

        if self.job_name:  # the slot of another DAG's job is not this DAG's to drop
            self.hook.check_name_owned(str(self.job_name), "drop the CDC slot of")
        url = self.url
        if url is None:
            from airflow.sdk import BaseHook

            url = BaseHook.get_connection(self.postgres_conn_id).get_uri()
            url = url.replace("postgres://", "postgresql://", 1)
        name = self.slot or cdc_object_name(self.job_name or "")
        publication = name if self.publication is None else (self.publication or None)
        try:
            done = drop_cdc_slot(url, name, publication)
        except EngineError as exc:
            raise AirflowException(f"cannot drop CDC slot {name}: {exc}") from exc
        self.log.info("Dropped %s", ", ".join(done) if done else f"nothing (no slot {name})")
        return done


class CopyCdcSlotsOperator(CheckpointBaseOperator):
    """
    Blue-green hand-over of a CDC job: for every ``PostgresCdcSource`` of green's pipeline,
    create green's replication slot as a copy of blue's (``ckpt cdc copy-slots``, in a child
    process with ``env_vars``). Run it *before* blue's hand-over snapshot: blue acknowledges
    only completed checkpoints, so the copy holds every change after the hand-over position.
    Idempotent (a retry, or green's slot left by an earlier run and not past blue's, is kept)
    and a no-op for a pipeline without a CDC source. Returns one entry per source:
    ``{uid, from, to, status: created|kept, position}``.

    :param pipeline: green's ``module:function``. Templated.
    :param blue_job: blue's job name. Templated.
    :param green_job: green's job name. Templated.
    :param env_vars: environment of the pipeline (options it reads). Templated.
    :param env_schema: the DAG author's ``{variable: JSON schema}`` for ``env_vars``: any
        other variable or value is refused, naming it.
    :param env_from_connections: ``{variable: conn_id}``: the URI of each Airflow connection
        goes into the pipeline's environment (as for
        :class:`~airflow_checkpoint_provider.operators.submit.SubmitCheckpointedJobOperator`).
        Templated.
    :param allowed_connections: the connection ids ``env_from_connections`` may name.
    :param timeout: seconds the child process may take.
    """

    template_fields: Sequence[str] = ("pipeline", "blue_job", "green_job", "env_vars",
                                      "env_from_connections")

    def __init__(self, *, pipeline: str, blue_job: str, green_job: str,
                 env_vars: dict[str, str] | None = None,
                 env_schema: dict[str, dict[str, Any]] | None = None,
                 env_from_connections: dict[str, str] | str | None = None,
                 allowed_connections: Sequence[str] = (),
                 timeout: float = 300.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline, self.blue_job, self.green_job = pipeline, blue_job, green_job
        self.env_vars = env_vars or {}
        self.env_schema = env_schema
        self.env_from_connections = env_from_connections
        self.allowed_connections = tuple(allowed_connections)
        self.timeout = timeout

    def execute(self, context: Context) -> list[dict]:
        import json
        import os
        import subprocess
        import sys

        from airflow_checkpoint_provider.hooks.job_env import pipeline_env

        for job in (self.blue_job, self.green_job):  # both jobs' slots are this DAG's
            self.hook.check_name_owned(str(job), "copy the CDC slots of")
        cmd = [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "cdc",
               "copy-slots", str(self.pipeline), "--from-job", str(self.blue_job),
               "--to-job", str(self.green_job), "--json"]
        # a refused variable raises its typed error (UnsafeJobEnvironmentError ...) naming it
        pipeline_vars = pipeline_env(self.env_vars, env_schema=self.env_schema,
                                     env_from_connections=self.env_from_connections,
                                     allowed_connections=self.allowed_connections)
        env = {**os.environ, **pipeline_vars,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=self.timeout)
        if proc.returncode != 0:
            lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            raise AirflowException(
                f"cannot copy the CDC slots of {self.blue_job} for {self.green_job}: "
                + (lines[-1] if lines else f"exit {proc.returncode}"))
        done = json.loads(proc.stdout[proc.stdout.index("["):])
        for d in done:
            self.log.info("CDC source %s: %s slot %s from %s at %s", d["uid"], d["status"],
                          d["to"], d["from"], d["position"])
        if not done:
            self.log.info("%s has no PostgreSQL CDC source: no slot to copy", self.pipeline)
        return done
