"""Recovery of a CDC job after a ``TRUNCATE`` of a captured table (issue 37, item 6).

The change stream refuses a ``TRUNCATE`` (pgoutput says only *that* the table was emptied,
not which rows went, so no ``-D`` can be emitted): the job fails naming the table. Its
target still holds the rows the source no longer has. Recovery resynchronizes the target
from a new snapshot: :func:`recover_after_truncate` drops the job's slot and publication and
empties the job's upsert target (the rows the TRUNCATE removed, and every other row: the new
snapshot writes every current row again), then the job is started *without restoring*.

Why empty rather than delete the difference: the new snapshot only emits rows that exist,
and the stream drops a change whose transaction the snapshot already saw, so a row deleted
between a difference-based clean-up and the snapshot would stay in the target. An empty
target is exactly what a new snapshot assumes. Readers of the target see it empty, then
filling, until the snapshot is done (schedule the recovery accordingly).
"""

from __future__ import annotations

import logging
import os

from ....errors import ConfigurationError
from ...base import Sink
from ...capabilities import SupportsUpsert
from ..connection import libpq_dsn

log = logging.getLogger(__name__)


def empty_upsert_target(sink: Sink) -> str:
    """Delete every row of an upsert sink's table (PostgreSQL, Delta or Iceberg); returns
    what was done. A table that does not exist yet is left alone."""
    from ...lakehouse.delta import DeltaSink
    from ...lakehouse.iceberg import IcebergSink
    from ..sink import PostgresSink

    # the sink capability, not an attribute probe: a sink that applies changelogs per key
    # is a SupportsUpsert (connectors/capabilities.py) in mode "upsert"
    if not isinstance(sink, SupportsUpsert) or sink.mode != "upsert":
        what = (f"mode={sink.mode!r}" if isinstance(sink, SupportsUpsert)
                else "it has no upsert mode")
        raise ConfigurationError(f"{sink.describe()}: not an upsert sink ({what}); an "
                                 "appending target keeps the history of changes, nothing to "
                                 "resynchronize")
    if isinstance(sink, PostgresSink):
        import psycopg
        from psycopg import sql

        with psycopg.connect(libpq_dsn(sink.url), autocommit=True) as conn:
            conn.execute(sql.SQL("DELETE FROM {}").format(
                sql.SQL(".").join(map(sql.Identifier, sink.table.split(".")))))
        return f"emptied PostgreSQL table {sink.table}"
    if isinstance(sink, DeltaSink):
        from deltalake import DeltaTable

        local = "://" not in sink.table_uri
        if local and not os.path.isdir(os.path.join(sink.table_uri, "_delta_log")):
            return f"Delta table {sink.table_uri} does not exist yet"
        DeltaTable(sink.table_uri, storage_options=sink.storage_options or None).delete()
        return f"emptied Delta table {sink.table_uri}"
    if isinstance(sink, IcebergSink):
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
        from pyiceberg.expressions import AlwaysTrue

        try:
            table = load_catalog(sink.identifier.split(".")[0], **sink.catalog).load_table(
                sink.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return f"Iceberg table {sink.identifier} does not exist yet"
        table.delete(AlwaysTrue())
        return f"emptied Iceberg table {sink.identifier}"
    raise ConfigurationError(f"{sink.describe()}: emptying this sink's target is not supported; "
                             "empty it by hand before starting the job without restoring")


def recover_after_truncate(source, job_name: str, sinks, *,
                           metadata_url: str | None = None) -> list[str]:
    """After a job failed on a ``TRUNCATE`` (stop it first): drop its slot and publication
    and empty its upsert targets; then start the job without restoring (a new snapshot).
    ``source``: the job's :class:`~.source.PostgresCdcSource`; ``sinks``: its upsert
    sinks. Returns what was done."""
    from .slots import drop_slot

    slot, publication = source.names(job_name)
    done = drop_slot(source.url, slot, publication, metadata_url=metadata_url)
    done += [empty_upsert_target(s) for s in sinks]
    log.info("Recovery of CDC job %s after a TRUNCATE: %s; start it without restoring",
             job_name, ", ".join(done))
    return done
