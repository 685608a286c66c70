"""The CDC source's bounded waits for older transactions (issue 37).

Creating a logical replication slot waits until every transaction that had an xid when it
started has ended (the slot's *consistent point*); a snapshot split waits the same way for
the transactions older than the slot (see :mod:`.source`). Any such transaction in the
cluster blocks them: a prepared transaction another tool left behind (``pg_prepared_xacts``)
or a session idle in a transaction, in any database. Unbounded, the job never started.

Both waits are bounded by the source's ``slot_wait_timeout_s`` (default
``$CKPT_CDC_SLOT_WAIT_TIMEOUT_S``, else :data:`DEFAULT_SLOT_WAIT_S`; ``0``: no limit). While
waiting, a warning every 10 s names the blocking transactions; at the limit the job fails
(:class:`SlotWaitTimeoutError`, no restarts: a restart would wait for the same ones) with
a message naming them: a prepared transaction's gid, database, owner and age, a session's
pid, database, user, application_name, state and transaction age.

"Blocking" is exact up to a race: a transaction whose xid is below the *horizon* (the next
xid when the wait started) and still running. xids in the catalog views are 32-bit; they
are widened against the next 64-bit xid (live xids are within 2**31 of it).
"""

from __future__ import annotations

import logging
import threading
import time

from ....errors import ConfigurationError
from ....settings import CDC_SLOT_WAIT_TIMEOUT
from ....settings import DEFAULT_CDC_SLOT_WAIT_S as DEFAULT_SLOT_WAIT_S
from ..errors import Blocker as Blocker  # defined here before issue 53
from ..errors import SlotWaitTimeoutError as SlotWaitTimeoutError  # defined here before issue 53

log = logging.getLogger(__name__)

SLOT_WAIT_ENV = CDC_SLOT_WAIT_TIMEOUT.name
# DEFAULT_SLOT_WAIT_S (five minutes) is declared with the variable in engine/settings.py
#: seconds between the warnings that name what a wait is waiting for
WARN_EVERY_S = 10.0


def slot_wait_timeout(value: float | None) -> float:
    """The source option's value, else ``$CKPT_CDC_SLOT_WAIT_TIMEOUT_S``, else the default."""
    if value is None:
        return CDC_SLOT_WAIT_TIMEOUT.get()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < float("inf")
    ):
        raise ConfigurationError(
            f"PostgresCdcSource slot_wait_timeout_s={value!r} must be a "
            "number of seconds >= 0 (0: wait without limit)"
        )
    return float(value)


def next_xid(conn) -> int:
    """The next 64-bit xid to be assigned. A snapshot's ``xmax`` is not it (since PostgreSQL
    14 it is the latest *completed* xid + 1: a running transaction may have a bigger one);
    ``age(xid)`` counts from the next xid (in a transaction without one), so
    ``xmax + age(xmax)`` is."""
    xmax, ahead = conn.execute(
        "SELECT x::text, age((x::text::bigint % 4294967296)::text::xid) "
        "FROM (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS x) s"
    ).fetchone()
    ahead = int(ahead)
    return int(xmax) + (ahead if 0 <= ahead < 2**31 else 0)  # INT_MAX: a special xid


def _widen(xid: int, nxt: int) -> int:
    """A 32-bit xid as the 64-bit one just below ``nxt`` (the next xid) it stands for."""
    return nxt - ((nxt - xid) % 2**32)


def list_blockers(conn, horizon: int | None = None) -> list[Blocker]:
    """Transactions with an xid (prepared ones and sessions, every database), oldest first;
    with ``horizon`` only those that started before it (what a wait begun then waits for),
    unless none does (a race at the start: then all of them)."""
    prepared = conn.execute(
        "SELECT gid, database, owner, transaction::text::bigint, "
        "extract(epoch FROM now() - prepared)::float8 FROM pg_prepared_xacts "
        "ORDER BY prepared"
    ).fetchall()
    sessions = conn.execute(
        "SELECT pid, datname, usename, application_name, state, backend_xid::text::bigint, "
        "extract(epoch FROM now() - xact_start)::float8 FROM pg_stat_activity "
        "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
        "ORDER BY xact_start"
    ).fetchall()
    nxt = next_xid(conn)  # after the lists: every xid in them is below it
    found = [
        (_widen(xid, nxt), Blocker("prepared", db, owner, age or 0.0, gid=gid))
        for gid, db, owner, xid, age in prepared
    ]
    found += [
        (
            _widen(xid, nxt),
            Blocker("session", db, user, age or 0.0, pid=pid, application_name=app, state=state),
        )
        for pid, db, user, app, state, xid, age in sessions
    ]
    older = [b for x, b in found if horizon is None or x < horizon]
    return older or [b for _, b in found]


def describe_blockers(blockers: list[Blocker]) -> str:
    if not blockers:
        return (
            "none visible to this role (a role without pg_read_all_stats does not see "
            "other users' sessions)"
        )
    return "; ".join(b.describe() for b in blockers)


def remedy(blockers: list[Blocker]) -> str:
    steps = [
        f"COMMIT PREPARED or ROLLBACK PREPARED {b.gid!r} (connected to database {b.database})"
        for b in blockers
        if b.kind == "prepared"
    ]
    steps += [
        f"end the transaction of session {b.pid} (SELECT pg_terminate_backend({b.pid}))"
        for b in blockers
        if b.kind == "session"
    ]
    return "; ".join(steps) or "end the transactions open on the server"


def timeout_error(
    where: str, what: str, waited: float, timeout: float, blockers: list[Blocker]
) -> SlotWaitTimeoutError:
    return SlotWaitTimeoutError(
        f"{where}: {what} waited {waited:.0f} s (slot_wait_timeout_s={timeout:g}) for "
        f"transactions older than it to end: {describe_blockers(blockers)}. Logical decoding "
        "can only start once every transaction open when the slot was created has ended. "
        f"Then start the job again: {remedy(blockers)}; or raise slot_wait_timeout_s "
        f"(${SLOT_WAIT_ENV}; 0 waits without limit)",
        blockers,
    )


def create_slot(
    conn, slot: str, connect, where: str, timeout: float, left: float | None = None
) -> None:
    """``pg_create_logical_replication_slot``, bounded by ``timeout`` seconds (0: none; at
    most ``left`` seconds of it remain when the caller waited already): it
    waits until every transaction with an xid at that moment has ended. While it waits, a
    warning every :data:`WARN_EVERY_S` names them; at the limit the statement is cancelled
    (``statement_timeout``: the half-created slot is dropped by the server) and
    :class:`SlotWaitTimeoutError` names them."""
    import psycopg

    horizon = next_xid(conn)
    done = threading.Event()
    started = time.monotonic()
    what = f"creating replication slot {slot}"

    def watch() -> None:
        delay = 2.0
        while not done.wait(delay):
            delay = WARN_EVERY_S
            try:
                with connect() as other:
                    found = describe_blockers(list_blockers(other, horizon))
            except Exception as exc:  # noqa: BLE001 - only a diagnostic
                found = f"(could not list them: {exc})"
            log.warning(
                "%s: %s has waited %.0f s%s for the transactions open when it started to end: %s",
                where,
                what,
                time.monotonic() - started,
                f" of {timeout:g} s" if timeout else "",
                found,
            )

    threading.Thread(target=watch, name=f"slot-wait-{slot}", daemon=True).start()
    try:
        if timeout:
            limit = timeout if left is None else left
            conn.execute(f"SET statement_timeout = {max(1, int(limit * 1000))}")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    except psycopg.errors.QueryCanceled as exc:
        if not timeout or "statement timeout" not in str(exc):
            raise
        waited = time.monotonic() - started
        try:
            with connect() as other:
                found = list_blockers(other, horizon)
        except psycopg.Error:
            found = []
        raise timeout_error(where, what, waited, timeout, found) from exc
    finally:
        done.set()
        if timeout and not conn.closed:
            try:
                conn.execute("RESET statement_timeout")
            except psycopg.Error:  # a broken connection: the error above says why
                pass


__all__ = [
    "DEFAULT_SLOT_WAIT_S",
    "SLOT_WAIT_ENV",
    "Blocker",
    "SlotWaitTimeoutError",
    "create_slot",
    "describe_blockers",
    "list_blockers",
    "slot_wait_timeout",
]
