"""Replication slot ownership in the catalog: which job a CDC source's slot belongs to.

A PostgreSQL logical replication slot is a cursor into the WAL that the server keeps for one
reader: two jobs reading one slot take changes from each other and acknowledge past each
other's position (silent loss). A row of ``cdc_slot_owners`` (revision 0007) records, per
database server and slot name, the job *name* that owns the slot; a job of another name that
is configured with the same slot is refused before it starts
(:meth:`CdcSlots.claim_cdc_slot`). Later jobs of the same name (restarts, restores, a
new version) keep owning it. ``ckpt cdc drop-slot --db ...`` releases the claim
with the slot.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import String, delete
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from ..errors import ConfigurationError
from .base import CatalogDB
from .models import Base, utcnow

log = logging.getLogger(__name__)


class SlotInUseError(ConfigurationError):
    """A CDC source names a replication slot that another job owns."""


class CdcSlotOwnerRow(Base):
    """``cdc_slot_owners`` (revision 0007): the job name owning a replication slot.

    ``server`` identifies the PostgreSQL cluster (its ``system_identifier``, or
    ``host:port`` when the role may not read it); slot names are unique per cluster.
    ``job_id`` is the last job of the name that claimed it (informational).
    """

    __tablename__ = "cdc_slot_owners"

    server: Mapped[str] = mapped_column(String(255), primary_key=True)
    slot: Mapped[str] = mapped_column(String(63), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[str] = mapped_column(String(64))
    claimed_at: Mapped[datetime]


class CdcSlots:
    """The metadata DB's CDC slot owners (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

    def claim_cdc_slot(self, *, server: str, slot: str, job_name: str, job_id: str) -> None:
        """Record that job ``job_name`` owns ``slot`` on ``server``; refuse
        (:class:`SlotInUseError`) when a job of another name owns it. Race-free: an
        insert-if-absent on the primary key, then a read of the owner that won."""

        def fn(session: Session) -> str:
            now = utcnow()
            values = {"server": server, "slot": slot, "job_name": job_name, "job_id": job_id,
                      "claimed_at": now}
            ins = (pg_insert if session.get_bind().dialect.name == "postgresql"
                   else sqlite_insert)(CdcSlotOwnerRow).values(**values)
            session.execute(ins.on_conflict_do_nothing(index_elements=["server", "slot"]))
            row = session.get(CdcSlotOwnerRow, (server, slot))
            assert row is not None
            if row.job_name == job_name:
                row.job_id = job_id
                row.claimed_at = now
            return row.job_name

        owner = self.db.write(fn, "claim_cdc_slot")
        if owner != job_name:
            raise SlotInUseError(
                f"job {job_name}: replication slot {slot!r} on server {server} belongs to job "
                f"{owner} (recorded in the metadata DB); two jobs on one slot take each other's "
                "changes. Give this job its own slot (leave slot= unset: the default name is "
                f"derived from the job name) or, if job {owner} is gone for good, release the "
                f"slot: ckpt cdc drop-slot --slot {slot} --db ...")

    def cdc_slot_owner(self, *, server: str, slot: str) -> str | None:
        def fn(session: Session) -> str | None:
            row = session.get(CdcSlotOwnerRow, (server, slot))
            return None if row is None else row.job_name

        return self.db.read(fn, "cdc_slot_owner")

    def release_cdc_slot(self, *, server: str, slot: str) -> bool:
        """Forget who owns ``slot`` (the slot was dropped); whether a claim existed."""

        def fn(session: Session) -> bool:
            res = session.execute(delete(CdcSlotOwnerRow).where(
                CdcSlotOwnerRow.server == server, CdcSlotOwnerRow.slot == slot))
            return bool(res.rowcount)  # type: ignore[attr-defined]

        return self.db.write(fn, "release_cdc_slot")
