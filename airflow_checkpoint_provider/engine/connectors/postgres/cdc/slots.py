"""Replication slots and publications of :class:`~.source.PostgresCdcSource`: names
that cannot collide, ownership by one job (metadata DB), checks at job start and on every
(re)connect, copying a slot for a blue-green hand-over, dropping.

**Names.** The default slot (and publication) name of job ``J`` is
``ckpt_<J folded to [a-z0-9_], cut>_<8 hex digits of sha256(J)>``: at most 63 bytes
(PostgreSQL's identifier limit), and two job names that differ only in case or after the
cut still get different names. An explicit ``slot=`` / ``publication=`` must be a valid
unquoted identifier (lower case: PostgreSQL folds unquoted names, so ``Orders`` would
silently become ``orders``).

**Ownership.** At job start the job master calls :meth:`PostgresCdcSource.check_job_start`:
the slot is recorded as owned by the job's name in the metadata DB (``cdc_slot_owners``) and
a job of another name configured with it is refused (:class:`~....catalog.SlotInUseError`).

**Position checks.** The server starts ``START_REPLICATION ... <lsn>`` silently at the
slot's confirmed position when that is newer than ``lsn``: changes in between would be
skipped. So on *every* (re)connect, once the replication connection holds the slot (no one
else can move it then), :func:`check_slot_position` compares the slot's
``confirmed_flush_lsn`` with the reader's position and fails the job
(:class:`SlotAheadError`) if the slot is ahead.
"""

from __future__ import annotations

import hashlib
import logging
import re

from ....errors import ConfigurationError
from ....extras import require
from ....state.operator_state import entry_value
from ..connection import libpq_dsn
from ..errors import CdcConfigurationError as CdcConfigurationError  # defined here before issue 53
from ..errors import CdcError
from ..errors import SlotAheadError as SlotAheadError  # defined here before issue 53
from .pgoutput import format_lsn, parse_lsn

log = logging.getLogger(__name__)

NAME_PATTERN = r"[a-z_][a-z0-9_]{0,62}"
MAX_NAME = 63


def check_name(name: str, option: str) -> str:
    if len(name.encode()) > MAX_NAME or not re.fullmatch(NAME_PATTERN, name):
        raise ConfigurationError(f"PostgresCdcSource {option}={name!r} is not a valid name "
                                 f"(lower-case letters, digits and _, at most {MAX_NAME} "
                                 "characters: PostgreSQL folds unquoted names to lower case "
                                 "and cuts them at 63 bytes)")
    return name


def job_object_name(job_name: str) -> str:
    """The default slot and publication name of a job: ``ckpt_<folded name>_<hash>``, where
    the hash is of the exact job name, so names differing in case or in a long tail differ."""
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    folded = re.sub(r"[^a-z0-9_]", "_", job_name.lower())
    return f"ckpt_{folded[:MAX_NAME - len('ckpt__') - len(digest)]}_{digest}"


def legacy_object_name(job_name: str) -> str:
    """The default name before hash suffixes (``ckpt_<folded name>`` cut at 63): a job
    restored from a snapshot of that time keeps using its existing slot of this name."""
    return ("ckpt_" + re.sub(r"[^a-z0-9_]", "_", job_name.lower()))[:MAX_NAME]


def server_identity(conn) -> str:
    """The PostgreSQL cluster's ``system_identifier`` (``host:port`` if the role may not
    read it): slot names are unique per cluster."""
    import psycopg

    try:
        row = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
        return f"pg:{row[0]}"
    except psycopg.Error:
        return f"{conn.info.host}:{conn.info.port}"


def slot_state(conn, slot: str) -> tuple[int | None, int | None, str | None] | None:
    """``(confirmed_flush_lsn, active_pid, database)`` of ``slot``, ``None`` if it does not
    exist."""
    row = conn.execute("SELECT confirmed_flush_lsn::text, active_pid, database FROM "
                       "pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    return (parse_lsn(row[0]) if row[0] else None), row[1], row[2]


def check_slot_position(conn, slot: str, lsn: int, walsender_pid: int, where: str) -> None:
    """After ``START_REPLICATION``: the slot (held by ``walsender_pid``) must not be
    confirmed past ``lsn``, else the server skipped the changes in between."""
    state = slot_state(conn, slot)
    if state is None:
        raise CdcError(f"{where}: replication slot {slot!r} is gone (dropped while the job ran)"
                       "; the changes since the last checkpoint are lost to this job. Drop the "
                       "publication too if wanted (ckpt cdc drop-slot) and start the job without "
                       "restoring to take a new snapshot")
    confirmed, active, _db = state
    if active is not None and active != walsender_pid:
        return  # not ours (yet): the next poll fails and reconnects
    if confirmed is not None and confirmed > lsn:
        raise SlotAheadError(
            f"{where}: replication slot {slot!r} was confirmed up to {format_lsn(confirmed)}, "
            f"past this job's position {format_lsn(lsn)}: another reader acknowledged changes "
            "this job never emitted (two jobs on one slot?), so the server would skip them. "
            "The job fails instead of losing them: give every job its own slot (leave slot= "
            "unset), then drop this slot (ckpt cdc drop-slot) and start without restoring")


def copy_slot(url: str, source_slot: str, target_slot: str) -> str:
    """Create ``target_slot`` as a copy of ``source_slot`` (``pg_copy_logical_replication_slot``,
    PostgreSQL 12+): it holds every change after ``source_slot``'s confirmed position.
    For a blue-green upgrade, run it *before* the hand-over savepoint (or before picking
    blue's latest checkpoint): blue confirms only completed checkpoints, so the copy starts
    at or before the hand-over position. Returns the copy's confirmed position."""
    require("postgres")
    import psycopg

    check_name(source_slot, "slot")
    check_name(target_slot, "slot")
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        try:
            conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)",
                         (source_slot, target_slot))
        except psycopg.errors.UndefinedObject as exc:
            raise ConfigurationError(f"replication slot {source_slot!r} does not exist: "
                                     f"nothing to copy ({exc})") from exc
        except psycopg.errors.DuplicateObject as exc:
            raise ConfigurationError(f"replication slot {target_slot!r} exists already; drop "
                                     "it first (ckpt cdc drop-slot) to copy again") from exc
        state = slot_state(conn, target_slot)
    assert state is not None and state[0] is not None
    log.info("Copied replication slot %s to %s at %s", source_slot, target_slot,
             format_lsn(state[0]))
    return format_lsn(state[0])


def drop_slot(url: str, slot: str, publication: str | None = None, *,
              metadata_url: str | None = None) -> list[str]:
    """Drop replication slot ``slot`` (and ``publication``, if given) of a CDC job; what was
    dropped. The slot must not be in use (stop the job first). With ``metadata_url`` the
    slot's owner recorded there is forgotten too (another job may use the name then)."""
    require("postgres")
    import psycopg
    from psycopg import sql

    check_name(slot, "slot")
    if publication:
        check_name(publication, "publication")
    done = []
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                        (slot,)).fetchone():
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg.errors.ObjectInUse as exc:
                raise ConfigurationError(f"replication slot {slot!r} is in use by a running job "
                                         f"({exc}); stop the job first") from exc
            done.append(f"slot {slot}")
        if publication and conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                                        (publication,)).fetchone():
            conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(publication)))
            done.append(f"publication {publication}")
        server = server_identity(conn)
    if metadata_url:
        from ....catalog import MetadataStore

        store = MetadataStore(metadata_url)
        try:
            if store.release_cdc_slot(server=server, slot=slot):
                done.append(f"owner record of {slot}")
        finally:
            store.close()
    return done


def _field(obj, name: str):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def restored_positions(snapshot, uid: str) -> dict[str, object]:
    """``{split: position}`` of source ``uid`` in a loaded snapshot (its split list state)."""
    out: dict[str, object] = {}
    op = (_field(_field(snapshot, "metadata"), "operators") or {}).get(uid) if snapshot else None
    for sub in _field(op, "subtasks") or ():
        for entry in _field(sub, "operator_state") or ():
            values = (entry_value(entry) if isinstance(entry, dict)
                      and ("codec" in entry or "value" in entry) else [entry])
            for e in values if isinstance(values, list) else ():
                if isinstance(e, dict) and "split" in e and e.get("position") is not None:
                    out[str(e["split"])] = e["position"]
    return out
