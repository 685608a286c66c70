"""Taking the replication slot over from a superseded run of the same job.

A replication slot is held by one walsender at a time; ``START_REPLICATION`` on a slot held
by another fails at once (``replication slot "..." is active for PID N``). After a crash the
walsender of the dead run can keep holding the slot: a connection whose client vanished
without closing it (a killed host, a half-open TCP connection, a frozen process) ends only at
the server's ``wal_sender_timeout`` (60 s by default) or later. Meanwhile the restored job is
RUNNING, and its stream split retried, restarted the job and retried again.

Every replication connection of the CDC source names its run in ``application_name``:
``ckpt-cdc <job id> <attempt>`` (:func:`application_name`). When the stream split finds its
slot held, :func:`release_stale_holder` looks the holder up (``pg_stat_activity``):

* a run of *this job name* that is not the current one -- an older attempt of this job, or
  another job id (slots belong to one job name, see :mod:`.slots`, and a job
  name has one live job at a time: this job started only after that one ended or was
  declared LOST) -- is superseded: its walsender is terminated (``pg_terminate_backend``,
  waiting up to :data:`TERMINATE_WAIT_S` for it to exit) and the split connects at once;
* any other reader (``pg_recvlogical``, another tool, a session without our
  ``application_name``) fails the job at once with :class:`SlotHeldError`, naming the slot,
  the PID, its ``application_name``, user and client address, and the remedy.
"""

from __future__ import annotations

import logging
import re
import time

from ..errors import Holder as Holder  # defined here before issue 53
from ..errors import ReplicationError
from ..errors import SlotHeldError as SlotHeldError  # defined here before issue 53

log = logging.getLogger(__name__)

#: the ``application_name`` prefix of the CDC source's connections
APP_PREFIX = "ckpt-cdc"
#: how long :func:`release_stale_holder` waits for a terminated walsender to exit
TERMINATE_WAIT_S = 10.0
_APP_PATTERN = re.compile(rf"{APP_PREFIX}(?: ([0-9A-Za-z_-]+) (\d+))?")


def application_name(job_id: str, attempt: int) -> str:
    """``ckpt-cdc <job id> <attempt>``: within PostgreSQL's 63 bytes for a 32-digit job id."""
    return f"{APP_PREFIX} {job_id} {int(attempt)}"[:63]


def parse_application_name(name: str | None) -> tuple[str | None, int | None] | None:
    """``(job id, attempt)`` of a CDC source connection's ``application_name``; ``(None,
    None)`` for the bare ``ckpt-cdc`` of versions before run names; ``None``: not ours."""
    m = _APP_PATTERN.fullmatch(name or "")
    if m is None:
        return None
    return (m.group(1), int(m.group(2))) if m.group(1) else (None, None)


def slot_holder(conn, slot: str) -> Holder | None:
    """The process holding ``slot``, ``None`` if it is free (or does not exist)."""
    row = conn.execute(
        "SELECT s.active_pid, a.application_name, a.usename, "
        "a.client_addr::text || ':' || a.client_port, "
        "extract(epoch FROM now() - a.backend_start)::float8 "
        "FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid "
        "WHERE s.slot_name = %s",
        (slot,),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return Holder(int(row[0]), row[1], row[2], row[3], row[4])


def release_stale_holder(
    conn, slot: str, *, job_id: str, attempt: int, where: str, wait_s: float = TERMINATE_WAIT_S
) -> Holder | None:
    """If ``slot`` is held by a superseded run of this job, terminate its walsender and wait
    (at most ``wait_s``) until the slot is free; returns the holder it released. ``None``:
    the slot is free, or held by this very run (nothing to do). Raises
    :class:`SlotHeldError` for a holder that is not a run of this job."""
    import psycopg

    holder = slot_holder(conn, slot)
    if holder is None:
        return None
    run = parse_application_name(holder.application_name)
    if run is None:
        raise SlotHeldError(
            f"{where}: replication slot {slot!r} is held by {holder.describe()}, which is not "
            "a run of this job (its connections are named 'ckpt-cdc <job id> <attempt>'): "
            "two readers of one slot skip each other's changes. Stop that reader, or end it "
            f"with SELECT pg_terminate_backend({holder.pid}), then start the job again "
            "(restore the latest checkpoint)",
            holder,
        )
    if run[0] == job_id and run[1] is not None and run[1] >= attempt:
        return None  # this run's own connection (or a newer attempt's): not stale
    what = (
        f"attempt {run[1]} of this job"
        if run[0] == job_id
        else f"job {run[0]} (ended or LOST: this job of the same name started after it)"
        if run[0]
        else "an earlier version of this job"
    )
    log.warning(
        "%s: replication slot %s is still held by %s, a superseded run: %s; ending "
        "that walsender (its client is gone, the server would keep it until "
        "wal_sender_timeout)",
        where,
        slot,
        holder.describe(),
        what,
    )
    try:
        try:  # PostgreSQL 14+: waits (at most wait_s) until the process exited
            conn.execute(
                "SELECT pg_terminate_backend(%s, %s)", (holder.pid, max(1, int(wait_s * 1000)))
            )
        except psycopg.errors.UndefinedFunction:  # before 14: signal only, polled below
            conn.execute("SELECT pg_terminate_backend(%s)", (holder.pid,))
    except psycopg.errors.InsufficientPrivilege as exc:  # retried: the server ends it too
        raise ReplicationError(
            f"{where}: replication slot {slot!r} is held by {holder.describe()}, a superseded "
            f"run ({what}), and this role may not end it ({exc}). Grant the role "
            f"pg_signal_backend, or run SELECT pg_terminate_backend({holder.pid}) as a "
            "superuser; the server ends it by itself after wal_sender_timeout"
        ) from exc
    except psycopg.errors.QueryCanceled:  # statement_timeout: checked below
        pass
    deadline = time.monotonic() + wait_s
    while (now := slot_holder(conn, slot)) is not None and now.pid == holder.pid:
        if time.monotonic() > deadline:
            raise ReplicationError(
                f"{where}: replication slot {slot!r}: the superseded walsender "
                f"{holder.describe()} did not exit within {wait_s:g} s of "
                "pg_terminate_backend"
            )
        time.sleep(0.05)
    log.info("%s: replication slot %s released by %s", where, slot, holder.describe())
    return holder


__all__ = [
    "APP_PREFIX",
    "Holder",
    "SlotHeldError",
    "application_name",
    "parse_application_name",
    "release_stale_holder",
    "slot_holder",
]
