"""What the job master checks for a :class:`~.source.PostgresCdcSource` before the
job's tasks start (:func:`check_job_start`), so a wrong configuration fails the job once
instead of spending every restart:

* the server and the tables (``wal_level``, tables exist, primary keys);
* the slot and publication names (a restored position keeps its publication), and the slot's owner (metadata DB, ``cdc_slot_owners``):
  a slot owned by another job name is refused;
* an existing publication includes every table; an existing slot is a ``pgoutput`` slot of
  this database;
* a restored change-stream position: its slot still exists and is not confirmed past it;
  a position of *another* slot (a blue-green green restoring blue's savepoint, the default
  names differ) needs this job's own slot, created as a copy of that slot if missing;
* the restored snapshot plan (``snapshot_splits``, ``buckets``): carried over when the
  restored snapshot is complete, refused naming the option while it is being read.
"""

from __future__ import annotations

import logging
from typing import Any

from ....errors import RestoreError
from ....extras import require
from ..errors import CdcConfigurationError
from .pgoutput import format_lsn
from .slots import server_identity, slot_state

log = logging.getLogger(__name__)


def _plan(restored: dict) -> tuple[int | None, int | None, bool]:
    """``(snapshot_splits, buckets, snapshot complete)`` of a restored set of positions
    (``None``: unknown, a snapshot from before the plan was recorded)."""
    splits = buckets = None
    snap = {k: v for k, v in restored.items() if k.startswith("snapshot-") and isinstance(v, dict)}
    stream = restored.get("stream")
    if not isinstance(stream, dict):
        stream = {}
    for pos in [stream, *snap.values()]:
        if pos.get("splits") is not None:
            splits = int(pos["splits"])
        if pos.get("buckets") is not None:
            buckets = int(pos["buckets"])
    if splits is None and snap:
        splits = max(int(k.split("-", 1)[1]) for k in snap) + 1
    done = bool(stream.get("parts") is not None) or (bool(snap) and all(
        bool(p.get("done")) for p in snap.values()) and len(snap) == (splits or 0))
    return splits, buckets, done


def _check_plan(src: Any, restored: dict, where: str) -> None:
    splits, buckets, done = _plan(restored)
    changed = [(opt, old, new) for opt, old, new in (
        ("snapshot_splits", splits, src.snapshot_splits), ("buckets", buckets, src.buckets))
        if old is not None and old != new]
    if not changed or not src.snapshot:
        return
    what = ", ".join(f"{opt}={new} (the restored snapshot was taken with {opt}={old})"
                     for opt, old, new in changed)
    if not done:
        raise RestoreError(
            f"{where}: {what}: the restored snapshot is still being read, and its remaining "
            "buckets and the change stream's filter depend on that plan. Restore with "
            + ", ".join(f"{opt}={old}" for opt, old, _ in changed)
            + " until the snapshot is done (a later checkpoint may change it), or start "
            "without restoring (drop the slot: a new snapshot)")
    for opt, old, new in changed:  # complete: the plan the stream filters with is kept
        log.warning("%s: %s=%d applies to the next snapshot; the restored one (complete) was "
                    "taken with %s=%d, which this job keeps", where, opt, new, opt, old)
        setattr(src, opt, old)


def _check_tables(tables: dict, restored: dict, where: str) -> None:
    """The restored positions name the same tables, in the same order (snapshot parts refer
    to them by index), with the same OIDs (a table dropped and created again, or swapped
    for a copy, while the job was stopped has another)."""
    for split, pos in sorted(restored.items()):
        if not isinstance(pos, dict) or pos.get("tables") is None:
            continue
        before = [str(t) for t in pos["tables"]]
        if before != list(tables):
            added = [t for t in tables if t not in before]
            removed = [t for t in before if t not in tables]
            change = "; ".join(filter(None, [
                f"added {', '.join(added)}" if added else "",
                f"removed {', '.join(removed)}" if removed else "",
                "reordered" if not added and not removed else ""]))
            raise RestoreError(
                f"{where}: tables= changed across the restore ({change}; the restored snapshot "
                f"covers {', '.join(before)}): a new table's rows were never snapshotted. "
                "Restore with the same tables=, and capture a new table in a job of its own, "
                "or start without restoring (drop the slot: a new snapshot of every table)")
        for name, oid in zip(before, pos.get("oids") or (), strict=False):
            if oid and int(oid) != tables[name].oid:
                raise RestoreError(
                    f"{where}: table {name!r} was replaced while the job was stopped (OID "
                    f"{oid} in the restored position {split!r}, now {tables[name].oid}: dropped "
                    "and created again, or swapped for a copy); its changes in between are not "
                    "in the stream. Drop the slot (ckpt cdc drop-slot) and start without "
                    "restoring (a new snapshot)")


def check_job_start(src: Any, store, *, job_name: str, job_id: str, fenced: bool,
                    restored: dict) -> None:
    require("postgres")
    import psycopg

    where = f"job {job_name}: CDC source {src.describe()}"
    stream = restored.get("stream") if isinstance(restored.get("stream"), dict) else None
    _check_plan(src, restored, where)
    with src.connect() as conn:
        tables = src.inspect(conn)
        _check_tables(tables, restored, where)
        src.resolved_names = None
        slot, pub = src.names(job_name, conn, legacy=stream is not None and "slot" not in stream)
        if stream is not None and stream.get("publication") and not src.publication:
            # keep the publication the restored position was read with (a green job restoring
            # blue's: pgoutput looks publications up as of each change's WAL position, so one
            # created after the copied slot's start would "not exist" for those changes)
            pub = str(stream["publication"])
        src.resolved_names = (slot, pub)
        store.claim_cdc_slot(server=server_identity(conn), slot=slot, job_name=job_name,
                             job_id=job_id)
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (pub,)).fetchone():
            published = {f"{s}.{t}" for s, t in conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                (pub,))}
            missing = [t for t in tables if t not in published]
            if missing:
                raise CdcConfigurationError(
                    f"{where}: publication {pub!r} does not include table(s) "
                    f"{', '.join(map(repr, missing))} (ALTER PUBLICATION {pub} ADD TABLE "
                    f"{', '.join(missing)})")
        row = conn.execute("SELECT plugin, database FROM pg_replication_slots WHERE "
                           "slot_name = %s", (slot,)).fetchone()
        if row is not None and (row[0] != "pgoutput" or row[1] != conn.info.dbname):
            raise CdcConfigurationError(
                f"{where}: replication slot {slot!r} exists for plugin {row[0]!r} in database "
                f"{row[1]!r}; the source needs a pgoutput slot in {conn.info.dbname!r} "
                "(choose another slot= or drop it)")
        if stream is None or stream.get("lsn") is None:
            return
        lsn = int(stream["lsn"])
        origin = str(stream.get("slot") or slot)
        if row is None and origin != slot:
            # a green job restoring blue's snapshot: its own slot, from blue's
            if slot_state(conn, origin) is None:
                raise RestoreError(
                    f"{where}: the restored position {format_lsn(lsn)} was read from slot "
                    f"{origin!r}, which does not exist, and this job's slot {slot!r} does not "
                    "either: nothing holds the changes after the restored position. Start "
                    "without restoring (a new snapshot)")
            try:
                conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)", (origin, slot))
                log.info("%s: created slot %s as a copy of %s", where, slot, origin)
            except psycopg.errors.DuplicateObject:
                pass
        elif row is None:
            raise RestoreError(
                f"{where}: replication slot {slot!r} is gone (dropped?): the changes after the "
                f"restored position {format_lsn(lsn)} are lost to this job. Start the job "
                "without restoring to take a new snapshot")
        state = slot_state(conn, slot)
        assert state is not None
        if state[0] is not None and state[0] > lsn:
            hint = (f" Slot {slot!r} was copied from {origin!r} only now, after that slot "
                    "was confirmed past the hand-over position. For a blue-green upgrade "
                    f"create green's slot before the hand-over: ckpt cdc copy-slot --url ... "
                    f"--from {origin} --to {slot} (then take blue's savepoint)."
                    if origin != slot else " A newer checkpoint (or another reader) acknowledged "
                    "the changes in between: restore the latest checkpoint.")
            raise RestoreError(
                f"{where}: the restored position {format_lsn(lsn)} is older than slot "
                f"{slot!r}'s confirmed position {format_lsn(state[0])}: the slot no longer has "
                f"the changes in between.{hint} Or drop the slot (ckpt cdc drop-slot) and start "
                "without restoring (a new snapshot)")
        if fenced:
            log.info("%s: fenced run: slot %s is read but never acknowledged", where, slot)
