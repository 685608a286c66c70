"""Operators for PostgreSQL change data capture jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

if TYPE_CHECKING:
    from airflow.sdk import Context


class DropCdcSlotOperator(BaseOperator):
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
