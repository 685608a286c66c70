"""The CDC cells: a PostgreSQL server of the harness (tests/pg_server.py, logical
replication), a fresh ``items`` database per run (tests/cdc_pipelines.items_database) and a
fresh target (tests/cdc_upsert_pipelines.create_target); writer processes change the table
for the cell's seconds once the job runs; after the last kill and the writers, the harness
waits until the target equals the source table (or its ``GROUP BY v``), then cancels the
job. The reference is the source table then: what a failure-free run converges to."""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from collections import Counter

_SERVER = None
ROWS, MODULO = 2_000, 50
CONVERGE_S = 90.0


def server():
    """The harness's PostgreSQL server (started once, stopped at exit)."""
    global _SERVER
    if _SERVER is None:
        from pg_server import PostgresServer

        _SERVER = PostgresServer().start()
        atexit.register(_SERVER.stop)
    return _SERVER


class CdcHooks:
    """:func:`.run._drive`'s hooks for one CDC run."""

    #: the status of a run that went to its end (the job is unbounded: the harness cancels
    #: it once it caught up)
    final_status = "CANCELED"

    def __init__(self, kind: str, root: str, seed: int, seconds: float) -> None:
        from cdc_pipelines import items_database
        from cdc_upsert_pipelines import create_target

        pg = server()
        self.kind, self.seed, self.seconds = kind, seed, seconds
        self._database = items_database(pg, ROWS, MODULO)
        self.url = next(self._database)
        if kind == "postgres-agg":  # retractions must carry the old v (the group they leave)
            import psycopg
            from cdc_pipelines import dsn

            with psycopg.connect(dsn(self.url), autocommit=True) as conn:
                conn.execute("ALTER TABLE items REPLICA IDENTITY FULL")
        target_url = pg.create_database() if kind.startswith("postgres") else None
        self.target_url = target_url
        self.target = create_target(kind, root, target_url)
        self.extra = {"url": self.url, "target": self.target}
        self.writers: list = []
        self.converge_deadline: float | None = None
        self.converged = False

    def on_running(self) -> None:
        from cdc_pipelines import start_writers

        self.writers = start_writers(
            self.url, self.seconds, [self.seed % 1000, self.seed % 1000 + 500]
        )

    def ready_to_stop(self) -> bool:
        """Once the writers ended: the target equals the source (or the wait ran out)."""
        if any(p.is_alive() for p in self.writers):
            return False
        if self.converge_deadline is None:
            self.converge_deadline = time.monotonic() + CONVERGE_S
        self.converged = self.rows() == self.reference()
        return self.converged or time.monotonic() > self.converge_deadline

    def rows(self) -> dict:
        from cdc_upsert_pipelines import target_rows

        try:
            return target_rows(self.target)
        except Exception:  # noqa: BLE001 - a table being committed: not converged yet
            return {"unreadable": True}

    def reference(self) -> dict:
        from cdc_upsert_pipelines import source_rows

        return source_rows(self.url, self.kind)

    def close(self) -> None:
        """Release the run's source database (its replication slots have server-wide names:
        the next run of the same pipeline would find its slot taken; a slot whose walsender
        the server has not ended yet is ended first) and roll back what the target kept."""
        next(self._database, None)
        self.rollback_left_prepared()

    def rollback_left_prepared(self) -> list[str]:
        """Roll back the prepared transactions left in the run's target database once the
        run is over. The server is shared by the harness's runs, and a logical replication
        slot is only created once every older transaction of the cluster ended: a prepared
        transaction a run left (finding 7: a LOST driver's) made every later CDC run of the
        harness wait for its slot until its time ran out."""
        if self.target_url is None:
            return []
        import psycopg
        from cdc_pipelines import dsn
        from psycopg import sql

        with psycopg.connect(dsn(self.target_url), autocommit=True) as conn:
            left = [
                g
                for (g,) in conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
                ).fetchall()
            ]
            for g in left:  # what a DBA would type; one that ended meanwhile, or that its own
                # backend is ending ("is busy"), is left alone
                with contextlib.suppress(psycopg.errors.UndefinedObject,
                                         psycopg.errors.ObjectNotInPrerequisiteState):
                    conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(g)))
        return left

    def multisets(self) -> tuple[Counter, Counter]:
        """(committed, reference) as multisets of rows."""

        def ms(rows: dict) -> Counter:
            return Counter(tuple(sorted(r.items())) for r in rows.values())

        return ms(self.rows()), ms(self.reference())


def for_entry(entry_name: str, root: str, seed: int, seconds: float) -> CdcHooks:
    os.makedirs(root, exist_ok=True)
    return CdcHooks(entry_name.removeprefix("cdc-"), root, seed, seconds)
