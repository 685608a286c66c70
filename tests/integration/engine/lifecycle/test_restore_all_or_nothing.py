"""A fallback is all-or-nothing (issue 35, item 4): before any sink discards or rewrites
anything, every source and sink of the job confirms it can restore the chosen checkpoint
(``Source.check_restore`` / ``Sink.check_restore``); otherwise the restore is refused with
UnsafeRestoreFallbackError naming the part that cannot go back, and nothing changed.

- falling back inside a running job past a damaged checkpoint whose output a Delta sink
  committed (it cannot remove it): refused, no record written twice (it duplicated before);
- ``restore="latest"`` with a PostgreSQL CDC source and a FileSink, the newest checkpoints'
  ``_metadata`` damaged: the CDC source cannot go back past its slot's confirmed position,
  so the restore is refused before the FileSink deletes a single part file (before, it
  deleted them, then the source refused and the job FAILED with the output gone).

Local runner, real connectors (delta-rs, a private PostgreSQL server)."""

from __future__ import annotations

import os
import time
from collections import Counter

import psycopg
import pytest
from cdc_pipelines import cdc_pipeline, dsn, items_database, start_writers, stream_lsn
from checkpoint_damage import CorruptLatest, corrupt, corrupted
from pipelines import Background, running_sum_pipeline

from airflow_checkpoint_provider.engine import JobFailedError, RestartStrategy
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.pgoutput import parse_lsn
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import job_object_name
from airflow_checkpoint_provider.engine.errors import UnsafeRestoreFallbackError


def _delta(workdir, request):
    from deltalake import DeltaTable

    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

    table = str(workdir / "sums")
    return DeltaSink(table), f"delta({table})", lambda: DeltaTable(table).to_pyarrow_table().to_pylist()


def _postgres_2pc(workdir, request):
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

    url = request.getfixturevalue("postgres_server").create_database()
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE sums (id bigint, key text, count bigint, sum bigint)")

    def rows():
        with psycopg.connect(dsn(url)) as conn:
            return [{"id": i, "key": k} for i, k in conn.execute("SELECT id, key FROM sums")]

    def roll_back_what_the_refused_job_left_prepared():
        # the refusal leaves the damaged checkpoint's transaction prepared (nothing rewritten);
        # a prepared transaction blocks every logical slot created on the server after it:
        # a CDC test on this xdist worker's server waited for it until its timeout
        with psycopg.connect(dsn(url), autocommit=True) as conn:
            for (gid,) in conn.execute("SELECT gid FROM pg_prepared_xacts "
                                       "WHERE database = current_database()").fetchall():
                conn.execute(f"ROLLBACK PREPARED '{gid}'")

    request.addfinalizer(roll_back_what_the_refused_job_left_prepared)
    return PostgresSink(url, "sums"), "postgres(sums, 2pc)", rows


@pytest.mark.timeout(240)
@pytest.mark.parametrize("make_sink", [_delta, _postgres_2pc], ids=["delta", "postgres-2pc"])
def test_falling_back_inside_a_job_past_committed_output_is_refused_not_duplicated(
        workdir, request, make_sink):
    sink, described, read_rows = make_sink(workdir, request)
    # long enough that two checkpoints complete before its end on a loaded machine; the
    # damage ends the job long before
    p = running_sum_pipeline(str(workdir), num_records=30_000, num_keys=20, rate=2000,
                             interval_ms=100, source_parallelism=1, keyed_parallelism=1,
                             sink=sink, restart=RestartStrategy.fixed_delay(attempts=3, delay_ms=0))
    keyed = next(n for v in p.execution_graph().vertices for n in v.nodes if n.uid == "sum")
    keyed.payload = CorruptLatest(str(workdir), "truncate_metadata", at_id=3000)

    with pytest.raises(JobFailedError) as err:
        p.run()
    message = str(err.value)
    assert "UnsafeRestoreFallbackError" in message, message
    assert f"sink 'out' ({described}) cannot go back" in message, message
    assert "refused before anything was removed or rewritten" in message
    result = err.value.result  # type: ignore[attr-defined]
    assert result.restarts == 1  # the restart found the damage and refused

    rows = read_rows()
    twice = [k for k, n in Counter((r["key"], r["id"]) for r in rows).items() if n > 1]
    assert rows and not twice, f"{len(twice)} records written twice, e.g. {twice[:3]}"
    damaged, _ = corrupted(workdir)
    with MetadataStore(p.metadata_url) as store:
        # nothing marked: the next restore="latest" sees the damage and decides again
        row = next(c for c in store.list_checkpoints(result.job_id) if c.location == damaged)
        assert row.status == "COMPLETED"
        assert store.get_job(result.job_id).status == "FAILED"


# -- restore="latest" with a CDC source ------------------------------------------------------


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, 2000, 100)


def _confirmed(url: str, slot: str) -> int:
    with psycopg.connect(dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return parse_lsn(row[0])


def _part_files(directory: str) -> set[str]:
    return {n for n in os.listdir(directory) if n.startswith("part-")}


@pytest.mark.timeout(300)
def test_restore_latest_refuses_before_the_file_sink_deletes_what_the_cdc_source_cannot_replay(
    db, tmp_path
):
    root, name = str(tmp_path), "cdc-fallback"

    def pipeline():
        return cdc_pipeline(
            root,
            db,
            name=name,
            source_parallelism=1,
            parallelism=1,
            snapshot_splits=1,
            buckets=16,
            interval_ms=150,
        )

    writers = start_writers(db, 60, [5], stop_file=os.path.join(root, "stop"))
    try:
        bg = Background(pipeline())
        job = bg.wait_running(min_checkpoints=1, timeout=120)
        with MetadataStore(f"sqlite:///{root}/meta.db") as store:
            # three retained checkpoints at different stream positions, the newest confirmed
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                done = [c for c in store.list_checkpoints(job.job_id) if c.status == "COMPLETED"]
                lsns = {stream_lsn(c.location) for c in done[-3:]} if len(done) >= 3 else set()
                if len(lsns - {None}) >= 2:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError("no two retained checkpoints at different stream positions")
        assert bg.request(job.job_id, "CANCEL").status == "SUCCEEDED"
        assert bg.result().status == "CANCELED"
    finally:
        open(os.path.join(root, "stop"), "w").close()
        for w in writers:
            w.join(30)

    confirmed = _confirmed(db, job_object_name(name))
    with MetadataStore(f"sqlite:///{root}/meta.db") as store:
        done = sorted(
            (c for c in store.list_checkpoints(job.job_id) if c.status == "COMPLETED"),
            key=lambda c: c.checkpoint_id,
        )
    # damage every checkpoint the slot acknowledged: "latest" falls back to one behind it
    damaged = [c for c in done if (stream_lsn(c.location) or 0) >= confirmed]
    behind = [c for c in done if (stream_lsn(c.location) or 0) < confirmed]
    assert damaged and behind, [(c.checkpoint_id, stream_lsn(c.location)) for c in done]
    for c in damaged:
        corrupt(c.location, "truncate_metadata")
    out = os.path.join(root, "out")
    before = _part_files(out)
    assert before

    with pytest.raises(UnsafeRestoreFallbackError) as err:
        pipeline().run(restore="latest")

    message = str(err.value)
    assert f"falling back to {behind[-1].location}" in message, message
    assert "source 'cdc' (postgres-cdc(public.items)) cannot go back" in message, message
    assert "older than replication slot" in message
    assert "refused before anything was removed or rewritten" in message
    assert _part_files(out) == before  # no committed part file deleted
    with MetadataStore(f"sqlite:///{root}/meta.db") as store:
        states = {c.checkpoint_id: c.status for c in store.list_checkpoints(job.job_id)}
    assert all(states[c.checkpoint_id] == "COMPLETED" for c in damaged)  # decided again next time


def test_sinks_say_whether_they_can_remove_committed_output_without_touching_anything(tmp_path):
    from airflow_checkpoint_provider.engine import FileSink
    from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink
    from airflow_checkpoint_provider.engine.connectors.lakehouse.iceberg import IcebergSink
    from airflow_checkpoint_provider.engine.connectors.postgres.sink import PostgresSink

    url = "postgresql://nobody@127.0.0.1:1/none"  # never connected to
    cannot = [DeltaSink(str(tmp_path / "d")), PostgresSink(url, "t"),
              IcebergSink("ns.t", catalog={"warehouse": f"file://{tmp_path}/wh"})]
    can = [FileSink(str(tmp_path / "f")), PostgresSink(url, "t", mode="upsert", key=["k"])]
    for sink in cannot + can:
        # going back without removing anything is always possible
        sink.check_restore("out", checkpoint_id=3, discard={}, location="chk-3")
    for sink in can:
        sink.check_restore("out", checkpoint_id=3, discard={"j1": 3, "j0": -1}, location="chk-3")
    for sink in cannot:
        with pytest.raises(UnsafeRestoreFallbackError,
                           match=r"job j0 \(all of it\), job j1 after checkpoint 3 would be "
                                 r"written again, and this sink cannot remove it"):
            sink.check_restore("out", checkpoint_id=3, discard={"j1": 3, "j0": -1},
                               location="chk-3")
    assert sorted(os.listdir(tmp_path)) == []  # nothing created
