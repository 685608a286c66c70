"""The snapshot signing key in the catalog: one random key per metadata DB.

:meth:`SnapshotKeys.snapshot_key` returns it, creating it the first time: a fixed
primary key and an insert-if-absent (``INSERT ... ON CONFLICT DO NOTHING`` on SQLite and
PostgreSQL), then a read, so processes that create it at once all get the one key that
won. The key is a secret: :class:`SnapshotKey` hides it from ``repr`` and nothing logs it.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from .base import CatalogDB
from .models import SnapshotKeyRow, as_utc, utcnow

log = logging.getLogger(__name__)

KEY_ID = 1
KEY_BYTES = 32


@dataclass(frozen=True)
class SnapshotKey:
    """This metadata DB's snapshot key (``key`` is secret: not in ``repr``) and when it was
    created."""

    key: bytes = field(repr=False)
    created_at: datetime


class SnapshotKeys:
    """The metadata DB's the snapshot-signing key (a collaborator of :class:`~.MetadataStore`)."""

    def __init__(self, db: CatalogDB) -> None:
        self.db = db

    def snapshot_key(self, *, create: bool = True) -> SnapshotKey | None:
        """The key that signs this DB's snapshots; created once (race-free) if absent and
        ``create`` (else ``None`` when there is none yet)."""

        def read(session: Session) -> SnapshotKey | None:
            row = session.get(SnapshotKeyRow, KEY_ID)
            return None if row is None else SnapshotKey(bytes(row.key), as_utc(row.created_at))

        found = self.db.read(read, "snapshot_key")
        if found is not None or not create:
            return found

        def insert(session: Session) -> SnapshotKey:
            values = {"key_id": KEY_ID, "key": secrets.token_bytes(KEY_BYTES),
                      "created_at": utcnow()}
            if session.get_bind().dialect.name == "postgresql":
                session.execute(pg_insert(SnapshotKeyRow).values(**values)
                                .on_conflict_do_nothing(index_elements=["key_id"]))
            else:
                session.execute(sqlite_insert(SnapshotKeyRow).values(**values)
                                .on_conflict_do_nothing(index_elements=["key_id"]))
            row = session.scalars(select(SnapshotKeyRow).where(
                SnapshotKeyRow.key_id == KEY_ID)).one()
            return SnapshotKey(bytes(row.key), as_utc(row.created_at))

        key = self.db.write(insert, "create snapshot_key")
        log.info("Snapshot signing key of the metadata DB: created at %s",
                 key.created_at.isoformat())
        return key
