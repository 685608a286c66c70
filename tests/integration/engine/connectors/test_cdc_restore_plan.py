"""The snapshot plan of PostgresCdcSource across a restore (issue 37, item 4): changing
``snapshot_splits`` or ``buckets`` while the restored snapshot is still being read is
refused before the job starts, naming the option and the restored value (on main 3 -> 4
emitted duplicates and lost rows, 3 -> 2 was refused as "a file was removed?"); once the
snapshot is complete the restored plan is carried over and the changelog stays exact."""

from __future__ import annotations

import time

import pytest
from cdc_pipelines import (
    cdc_pipeline,
    committed_in_order,
    items_database,
    replay,
    source_table,
    start_writers,
)
from pipelines import Background

from airflow_checkpoint_provider.engine import RestoreError
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.postgres.cdc.source import PostgresCdcSource

ROWS = 3_000


@pytest.fixture
def db(postgres_server):
    yield from items_database(postgres_server, ROWS, 10)


def _positions(location):
    from airflow_checkpoint_provider.engine.connectors.postgres.cdc.slots import restored_positions
    from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

    class Snap:
        metadata = load_snapshot(location, check_hmac=False)

    return restored_positions(Snap, "cdc")


def _mid_snapshot_positions(db) -> dict:
    """Real positions of 3 snapshot splits after one batch each (the snapshot half read)."""
    src = PostgresCdcSource(db, ["items"], snapshot_splits=3, buckets=64)
    out = {}
    for i in range(3):
        reader = src.open_split(f"snapshot-{i}", None, SourceContext("j", "cdc-plan", "cdc", 0,
                                                                   1, 0))
        try:
            while not reader.read_batch(50):
                time.sleep(0.05)
            out[f"snapshot-{i}"] = reader.position()
        finally:
            reader.close()
    return out


@pytest.mark.timeout(120)
def test_a_changed_snapshot_plan_is_refused_while_the_snapshot_is_read(db, tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    restored = _mid_snapshot_positions(db)
    assert not any(p["done"] for p in restored.values())
    legacy = {k: {f: v for f, v in p.items() if f not in ("splits", "buckets", "slot")}
              for k, p in restored.items()}  # positions written before the plan was recorded
    for options, named, positions in (({"snapshot_splits": 4}, "snapshot_splits=4", restored),
                                      ({"snapshot_splits": 2}, "snapshot_splits=2", restored),
                                      ({"buckets": 128}, "buckets=128", restored),
                                      ({"snapshot_splits": 4}, "snapshot_splits=4", legacy)):
        src = PostgresCdcSource(db, ["items"], **{"snapshot_splits": 3, "buckets": 64, **options})
        option, value = named.split("=")
        with pytest.raises(RestoreError, match=f"{named} \\(the restored snapshot was taken with "
                           f"{option}=(3|64)\\).*still being read"):
            src.check_job_start(store, job_name="cdc-plan", job_id="j2", fenced=False,
                                restored=positions)
    same = PostgresCdcSource(db, ["items"], snapshot_splits=3, buckets=64)
    same.check_job_start(store, job_name="cdc-plan", job_id="j2", fenced=False, restored=restored)
    store.close()


@pytest.mark.timeout(240)
def test_a_changed_snapshot_plan_is_carried_over_once_the_snapshot_is_complete(db, tmp_path):
    root = str(tmp_path)
    name = "cdc-plan-done"
    bg = Background(cdc_pipeline(root, db, name=name, snapshot_splits=3, buckets=64))
    job = bg.wait_running(timeout=90)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until a checkpoint holds the complete snapshot
        done = [c for c in bg.store.list_checkpoints(job.job_id) if c.status == "COMPLETED"]
        try:
            if done and (_positions(done[-1].location).get("stream") or {}).get("parts"):
                break
        except OSError:
            pass
        time.sleep(0.2)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    assert _positions(req.result["location"])["stream"]["parts"] is not None
    # complete: the new plan applies to a next snapshot; the restored one is kept. On main
    # the new split snapshot-3 read its buckets again (duplicate +I, caught by replay)
    bg = Background(cdc_pipeline(root, db, name=name, snapshot_splits=4, buckets=128),
                    restore=req.result["location"])
    job = bg.wait_running(timeout=90)
    for p in start_writers(db, 3, [21]):
        p.join()
    time.sleep(2)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    assert replay(committed_in_order(str(tmp_path / "out"))) == source_table(db)
