"""The replication slots of a blue-green upgrade of a CDC job (``ckpt cdc copy-slots``, the
``copy_cdc_slots`` task of the blue-green DAG).

Green must read its own slot (a fenced job never acknowledges, and two jobs on one slot
skip each other's changes), holding every change after blue's hand-over position. Blue
acknowledges only completed checkpoints, so a copy of blue's slot made *before* the
hand-over snapshot starts at or before it. :func:`copy_slots` makes that copy for every
:class:`~.source.PostgresCdcSource` of green's pipeline; it is idempotent (a DAG
retry, or green's slot left by an earlier run, is kept when it is not past blue's) and a
no-op for a pipeline without a CDC source.
"""

from __future__ import annotations

import logging
from typing import Any

from ....errors import ConfigurationError
from ....extras import require
from ..connection import libpq_dsn
from .pgoutput import format_lsn
from .slots import job_object_name, slot_state

log = logging.getLogger(__name__)


def cdc_sources(graph) -> list[tuple[str, Any]]:
    """``(uid, source)`` of every PostgreSQL CDC source of an execution graph."""
    from .source import PostgresCdcSource

    return [(n.uid or n.name, n.payload) for v in graph.vertices for n in v.nodes
            if n.kind == "source" and isinstance(n.payload, PostgresCdcSource)]


def copy_slots(graph, *, blue_job: str, green_job: str) -> list[dict[str, Any]]:
    """Create green's slot as a copy of blue's for each CDC source of ``graph`` (green's
    pipeline); one entry per source: ``{uid, from, to, status, position}`` with status
    ``created`` or ``kept``. Refused (``ConfigurationError`` naming the source uid and the
    remedy): a source with an explicit ``slot=`` (blue and green would share it), blue's slot
    missing, green's slot in use or confirmed past blue's."""
    if blue_job == green_job:
        raise ConfigurationError(f"blue and green are both job {blue_job!r}: a blue-green "
                                 "upgrade needs two job names")
    done: list[dict[str, Any]] = []
    for uid, src in cdc_sources(graph):
        if src.slot:
            raise ConfigurationError(
                f"CDC source {uid!r} sets slot={src.slot!r}: blue and green would read the "
                "same replication slot (a fenced green is refused, an unfenced one skips "
                "blue's changes). Remove slot= so each job gets its own "
                "(ckpt_<job name>_<hash>), or copy it by hand: ckpt cdc copy-slot")
        require("postgres")
        import psycopg

        blue, green = job_object_name(blue_job), job_object_name(green_job)
        entry: dict[str, Any] = {"uid": uid, "from": blue, "to": green}
        with psycopg.connect(libpq_dsn(src.url), autocommit=True) as conn:
            have = slot_state(conn, blue)
            if have is None or have[0] is None:
                raise ConfigurationError(
                    f"CDC source {uid!r}: blue job {blue_job!r} has no replication slot "
                    f"{blue!r} in {conn.info.dbname!r} (is blue a CDC job of this name, and "
                    "running?)")
            mine = slot_state(conn, green)
            if mine is None:
                try:
                    conn.execute("SELECT pg_copy_logical_replication_slot(%s, %s)",
                                 (blue, green))
                    entry["status"] = "created"
                except psycopg.errors.DuplicateObject:  # a concurrent try made it
                    entry["status"] = "kept"
                mine = slot_state(conn, green)
                assert mine is not None
            else:
                if mine[1] is not None:
                    raise ConfigurationError(
                        f"CDC source {uid!r}: green's replication slot {green!r} is in use "
                        f"(walsender pid {mine[1]}): is a job named {green_job!r} running? "
                        "Stop it first")
                # blue acknowledges only completed checkpoints: its position now is at or
                # after any hand-over snapshot to come, so a green slot not past it holds
                # every change green will need
                if mine[0] is not None and mine[0] > have[0]:
                    raise ConfigurationError(
                        f"CDC source {uid!r}: green's replication slot {green!r} exists and is "
                        f"confirmed at {format_lsn(mine[0])}, past blue's slot {blue!r} at "
                        f"{format_lsn(have[0])}: it lacks changes green needs. Drop it "
                        f"(ckpt cdc drop-slot --url ... --slot {green} --keep-publication) "
                        "and run the upgrade again")
                entry["status"] = "kept"
        entry["position"] = format_lsn(mine[0]) if mine[0] is not None else None
        log.info("CDC source %r: green's slot %s %s (from blue's %s) at %s", uid, green,
                 entry["status"], blue, entry["position"])
        done.append(entry)
    return done
