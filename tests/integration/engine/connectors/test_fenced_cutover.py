"""Exactly-once blue-green cut-over with fenced sinks (issue 29).

Blue runs under load into a file sink. Green (restored from blue's savepoint) runs next to
it with ``fence_sinks=True``: it checkpoints, pre-commits every epoch, publishes nothing.
At the cut-over blue stops with a savepoint, the fenced green is cancelled (what it staged
is discarded), and green restarts unfenced from blue's final savepoint. The published output
must equal a single failure-free job's: every (key, id) row once, none missing, and per key
the counts run 1..n with the reference's final sum (the state was handed over exactly once;
a row's count depends on the arrival order of its key's records, so rows are compared by id).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from cutover_helpers import compare, published_by, reference_rows, staged_by
from pipelines import (
    Background,
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)
from postgres_pipelines import PREPARED_HERE

from airflow_checkpoint_provider.engine import (
    ConfigurationError,
    FileSink,
    JobFailedError,
    RestoreError,
    read_committed,
)

# blue would run N / RATE = 120 s: the cut-over must come while it still runs, also on a
# loaded machine (at 30 s, a green slow to start and to restart after its SIGKILL saw blue
# finish first); the cut-over stops blue early and green runs the rest unthrottled (what
# green then reads costs CPU only: 60,000 records at 500/s keep the 120 s of 120,000 at
# 1,000/s with half the records)
N, KEYS, SEED, RATE = 60_000, 50, 7, 500


@pytest.fixture(scope="module")
def reference() -> Counter:
    """The rows of one failure-free job over the same input (each (key, id) once)."""
    return reference_rows(num_records=N, num_keys=KEYS, seed=SEED)


class _Files:
    """The published and held output of a file sink directory."""

    def __init__(self, out: str) -> None:
        self.out = out

    def sink(self):
        return FileSink(self.out)

    def rows(self) -> list[dict]:
        return list(read_committed(self.out))

    def published_by(self, job_id: str) -> list[str]:
        return published_by(self.out, job_id)

    def held_by(self, job_id: str) -> list[str]:
        return staged_by(self.out, job_id)


class _Table:
    """The same for a PostgreSQL table written with prepared transactions (gids carry the
    job id; committed rows do not, so ``published_by`` cannot tell and says nothing)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def sink(self):
        from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

        return PostgresSink(self.url, "sums", ["id", "key", "count", "sum"])

    def _query(self, sql: str) -> list[dict]:
        import psycopg

        from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

        with psycopg.connect(libpq_dsn(self.url)) as conn, conn.cursor(
                row_factory=psycopg.rows.dict_row) as cur:
            cur.execute(sql)
            return cur.fetchall()

    def rows(self) -> list[dict]:
        return self._query("SELECT id, key, count, sum FROM sums")

    def published_by(self, job_id: str) -> list[str]:
        return []

    def held_by(self, job_id: str) -> list[str]:
        return [r["gid"] for r in self._query(PREPARED_HERE)
                if job_id in r["gid"]]


def _blue_green(root: str, *, kill_green: bool, target=None) -> tuple[Counter, dict]:
    out = os.path.join(root, "out")
    target = target or _Files(out)
    blue_bg = Background(running_sum_pipeline(root, name="rs-blue", num_records=N,
                                              num_keys=KEYS, seed=SEED, rate=RATE, out=out,
                                              sink=target.sink()))
    blue = blue_bg.wait_running(min_checkpoints=1)
    sp = blue_bg.request(blue.job_id, "SAVEPOINT", {})
    assert sp.status == "SUCCEEDED", sp.error
    faults = None
    if kill_green:  # SIGKILL a green slot while it processes a record past the savepoint
        upto = max((r["id"] for r in target.rows()), default=0)
        faults = FaultPlan(os.path.join(root, "faults"), [("kill", upto + 400)])
    green_v = running_sum_pipeline(root, name="rs-green", num_records=N, num_keys=KEYS,
                                   seed=SEED, rate=RATE, out=out, faults=faults,
                                   sink=target.sink())
    green_v.version = "v2"
    green_bg = Background(green_v, restore=sp.result["location"], fence_sinks=True)
    green = green_bg.wait_running(min_checkpoints=3, timeout=90)
    if kill_green:
        import time

        deadline = time.monotonic() + 60
        while not faults.fired() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert faults.fired(), "the green slot was not killed"
        # the fenced green restarts from its own (fenced) checkpoint and checkpoints again
        while time.monotonic() < deadline:
            if len([c for c in green_bg.store.list_checkpoints(green.job_id)
                    if c.status in ("COMPLETED", "SUBSUMED")]) >= 6:
                break
            time.sleep(0.1)
    held = target.held_by(green.job_id)
    if isinstance(target, _Table):  # each epoch's prepared transactions go once it completed
        assert len(held) <= 3 * 3, f"a fenced sink keeps a few epochs prepared: {held}"
    else:
        assert held, "fenced green pre-commits (stages) its epochs"
    assert target.published_by(green.job_id) == [], "fenced green published nothing"
    assert blue_bg.store.get_job(blue.job_id).status == "RUNNING", "blue still serving"

    # the cut-over: blue stops with a final savepoint; the fenced green ends
    final = blue_bg.request(blue.job_id, "STOP_WITH_SAVEPOINT", {})
    assert final.status == "SUCCEEDED", final.error
    assert blue_bg.result().status == "STOPPED"
    cancel = green_bg.request(green.job_id, "CANCEL", {})
    assert cancel.status == "SUCCEEDED", cancel.error
    green_result = green_bg.result()
    assert green_result.status == "CANCELED"
    assert target.published_by(green.job_id) == [] and target.held_by(green.job_id) == []
    # green live: same code, unfenced, from blue's final savepoint
    green_live = running_sum_pipeline(root, name="rs-green", num_records=N, num_keys=KEYS,
                                      seed=SEED, out=out, sink=target.sink())
    green_live.version = "v2"
    live = green_live.run(restore=final.result["location"])
    assert live.status == "FINISHED"
    published = target.rows()
    rows = Counter((r["key"], r["id"]) for r in published)
    check_exactly_once_rows(published, expected_running_sums(N, KEYS, SEED))
    info = {"fenced_restarts": green_result.restarts, "held_at_cutover": len(held),
            "blue_files": len(target.published_by(blue.job_id)),
            "green_files": len(target.published_by(live.job_id))}
    if isinstance(target, _Files):
        assert info["blue_files"] and info["green_files"], info
    return rows, info


@pytest.mark.timeout(300)
def test_blue_green_cutover_under_load_is_exactly_once(tmp_path, reference):
    rows, info = _blue_green(str(tmp_path), kill_green=False)
    counts = compare(rows, reference)
    print("blue-green cut-over:", counts, info)
    assert counts == {"rows": N, "duplicates": 0, "missing": 0, "unexpected": 0}


@pytest.mark.timeout(300)
def test_sigkill_of_fenced_green_during_the_overlap_publishes_nothing_twice(tmp_path, reference):
    rows, info = _blue_green(str(tmp_path), kill_green=True)
    counts = compare(rows, reference)
    print("blue-green cut-over with SIGKILL of green:", counts, info)
    assert info["fenced_restarts"] >= 1
    assert counts == {"rows": N, "duplicates": 0, "missing": 0, "unexpected": 0}


class _NoHoldSink(FileSink):
    def can_hold_commits(self) -> bool:
        return False


@pytest.mark.timeout(60)
def test_fenced_mode_refuses_a_sink_that_cannot_hold_commits(tmp_path):
    p = running_sum_pipeline(str(tmp_path), num_records=100, sink=_NoHoldSink(str(tmp_path / "o")))
    with pytest.raises(ConfigurationError, match="cannot .its writes are visible"):
        p.run(fence_sinks=True)


@pytest.mark.timeout(240)  # three short jobs: 120 s ran out at load 30 on 2 cores
def test_an_unfenced_job_refuses_to_restore_a_fenced_snapshot(tmp_path):
    root = str(tmp_path)
    fenced = running_sum_pipeline(root, name="rs", num_records=2000).run(fence_sinks=True)
    assert fenced.status == "FINISHED" and fenced.latest_checkpoint
    assert not [n for n in os.listdir(os.path.join(root, "out")) if n.startswith("part-")]
    assert staged_by(os.path.join(root, "out"), fenced.job_id) == [], "held output discarded"
    with pytest.raises((RestoreError, JobFailedError), match="fenced sinks"):
        running_sum_pipeline(root, name="rs2", num_records=2000).run(
            restore=fenced.latest_checkpoint)
    # ``latest`` skips the fenced run's checkpoints: a fresh start, every record published
    again = running_sum_pipeline(root, name="rs", num_records=2000).run(restore="latest")
    assert again.restored_from is None and again.status == "FINISHED"


@pytest.mark.timeout(300)
def test_blue_green_cutover_into_postgresql_with_sigkill_is_exactly_once(tmp_path, reference,
                                                                         postgres_server):
    import psycopg

    from airflow_checkpoint_provider.engine.connectors.postgres.connection import libpq_dsn

    url = postgres_server.create_database()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE sums (id bigint, key text, count bigint, sum bigint)")
    target = _Table(url)
    rows, info = _blue_green(str(tmp_path), kill_green=True, target=target)
    counts = compare(rows, reference)
    print("blue-green cut-over into PostgreSQL with SIGKILL of green:", counts, info)
    assert counts == {"rows": N, "duplicates": 0, "missing": 0, "unexpected": 0}
    assert target._query(PREPARED_HERE) == [], "nothing left prepared"
