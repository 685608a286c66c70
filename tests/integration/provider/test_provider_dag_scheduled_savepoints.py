"""DAG scheduled_savepoints end to end with dag.test() (local runner, real SQLite metadata DB)."""

from __future__ import annotations

import os

import pytest
from provider_helpers import completed_checkpoints, run_dag, start_job, wait_for, xcom

from airflow_checkpoint_provider.engine.catalog import MetadataStore

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.mark.timeout(150)
def test_each_run_takes_a_savepoint_and_retention_disposes_the_older_ones(
        airflow_db, metadata_url, tmp_path, monkeypatch):
    # Airflow 3.3.2's dag.test() hands DagRun.update_state a DAG whose deadline alerts are
    # not written to the DB (dicts, not ids): a successful run then fails to look them up.
    # The scheduler path (tests/deployment/cluster) has them; dag.test() runs this DAG without its alert.
    monkeypatch.setattr(airflow_db.get_dag("scheduled_savepoints"), "deadline", None)
    store = MetadataStore(metadata_url)
    job = start_job(metadata_url, tmp_path)
    wait_for(lambda: completed_checkpoints(store, job), 60, "a checkpoint")
    conf = {"job_name": "versioned-sum", "savepoint_dir": str(tmp_path / "example" / "savepoints"),
            "max_count": 1, "max_age_hours": 72}

    runs = [run_dag(airflow_db, "scheduled_savepoints", conf) for _ in range(2)]

    for state, tis, _ in runs:
        assert tis == {"check_conf": "success", "savepoint": "success", "retention": "success"}
        assert state == "success"
    first, second = (xcom(dr, "savepoint") for _, _, dr in runs)
    assert first != second
    assert xcom(runs[0][2], "retention") == []
    assert xcom(runs[1][2], "retention") == [first]
    report = xcom(runs[1][2], "retention", key="retention_report")
    assert [(s["location"], s["decision"], s["rule"]) for s in report["savepoints"]] == [
        (first, "disposed", "disposed"), (second, "kept", "newest")]
    assert report["savepoints"][0]["reason"] == "beyond max_count 1 (newest 2)"
    rows = {c.location: c for c in store.list_checkpoints(job, kind="SAVEPOINT")}
    assert rows[first].status == "DISCARDED" and not os.path.exists(first)
    assert rows[second].status == "COMPLETED"
    assert os.path.isfile(os.path.join(second, "_metadata"))
    assert xcom(runs[1][2], "savepoint", key="savepoint_path") == second
    assert store.get_job(job).status == "RUNNING"

    # each savepoint emitted an asset event of checkpoint://versioned-sum/savepoints
    for (_, _, dr), location in zip(runs, (first, second), strict=True):
        [event] = asset_events(dr, "savepoint")
        assert event["uri"] == "checkpoint://versioned-sum/savepoints"
        checkpoint_id = xcom(dr, "savepoint", key="checkpoint_id")
        row = store.get_checkpoint(job, checkpoint_id)
        assert event["extra"] == {
            "job_id": job, "job_name": "versioned-sum", "checkpoint_id": checkpoint_id,
            "location": location, "kind": "SAVEPOINT", "state_size": row.state_size,
            "complete_time": row.complete_time.isoformat()}
        assert event["aliases"] == ["checkpoint-savepoints"]
    store.close()


def asset_events(dr, task_id: str) -> list[dict]:
    """The asset events a task of a DAG run emitted, as Airflow's DB holds them."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).filter(AssetEvent.source_dag_id == dr.dag_id,
                                                AssetEvent.source_run_id == dr.run_id,
                                                AssetEvent.source_task_id == task_id).all()
        return [{"uri": e.asset.uri, "extra": e.extra,
                 "aliases": [a.name for a in e.source_aliases]} for e in rows]


@pytest.mark.timeout(150)
def test_a_run_cannot_savepoint_or_dispose_another_teams_job(airflow_db, metadata_url, tmp_path,
                                                               monkeypatch):
    """Security issue 50, break 2, as reported: a user allowed to trigger only this DAG
    passed ``{"job_name": "team-b-job", "max_count": 1, "max_age_hours": 0}``; the run took
    a savepoint of team B's job and disposed three of its savepoints. Now the run fails at
    its savepoint task naming both DAGs; no request reaches the job, nothing is deleted and
    no XCom or asset event of this DAG says anything about B's job."""
    monkeypatch.setattr(airflow_db.get_dag("scheduled_savepoints"), "deadline", None)
    store = MetadataStore(metadata_url)
    store.reserve_job_owner("b1", "team_b", "scheduled__1")
    store.create_job(job_id="b1", job_name="team-b-job", parallelism=1)
    store.set_job_status("b1", "RUNNING")
    conf = {"job_name": "team-b-job", "max_count": 1, "max_age_hours": 0, "savepoint_dir": ""}

    state, tis, dr = run_dag(airflow_db, "scheduled_savepoints", conf)

    assert state == "failed"
    assert tis["savepoint"] == "failed" and tis["retention"] in ("upstream_failed", None)
    assert store.list_control_requests("b1") == []
    assert xcom(dr, "savepoint", key="job_id") is None
    assert asset_events(dr, "savepoint") == []
    store.set_job_status("b1", "CANCELED")
    store.close()
