"""Jobs belong to DAGs (security issue 50, break 2): a user allowed to trigger only DAG A
passed another DAG's job name in A's conf; A's tasks took a savepoint of that job and
disposed its savepoints. Every operator, sensor and trigger acting on an existing job now
refuses a job owned by another DAG, naming both, unless the DAG author allows that DAG in
code (``allowed_owner_dags``); the job's owner is recorded when its row is created."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from airflow.sdk import DAG
from savepoint_helpers import FakeTI
from test_provider_operators import _submit

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.operators.control import (
    CancelJobOperator,
    StopWithSavepointOperator,
    TriggerSavepointOperator,
)
from airflow_checkpoint_provider.operators.savepoints import (
    DisposeSavepointsOperator,
    PinSavepointOperator,
    UnpinSavepointsOperator,
)
from airflow_checkpoint_provider.operators.stability import StabilityGateOperator
from airflow_checkpoint_provider.ownership import DagAccess, JobOwnershipError
from airflow_checkpoint_provider.sensors.checkpoint import (
    CheckpointCompletedSensor,
    ControlRequestSensor,
    JobStateSensor,
)
from airflow_checkpoint_provider.triggers.checkpoint import JobStateTrigger

START = datetime(2026, 1, 1)
OWNED_BY_B = r"job 'team-b-job' belongs to DAG 'team_b'; DAG 'dag_a' may .* only its own jobs"


def _team_b_job(url: str, tmp_path, *, savepoints: int = 0) -> list[str]:
    """A RUNNING job of DAG ``team_b`` with ``savepoints`` completed savepoints (real
    directories); returns their locations."""
    locations = []
    with MetadataStore(url) as store:
        store.reserve_job_owner("b1", "team_b", "scheduled__1")
        store.create_job(job_id="b1", job_name="team-b-job", parallelism=1)
        store.set_job_status("b1", "RUNNING")  # no heartbeat: no process to cancel at the end
        for n in range(1, savepoints + 1):
            loc = tmp_path / "team-b" / f"savepoint-b1-{n}"
            loc.mkdir(parents=True)
            (loc / "_metadata").write_text("{}")
            now = datetime.now(UTC)
            store.add_pending_checkpoint("b1", n, kind="SAVEPOINT", trigger_time=now,
                                         location=str(loc))
            store.complete_checkpoint("b1", n, complete_time=now, duration_ms=1, state_size=1,
                                      checkpointed_size=1, task_stats=[])
            locations.append(str(loc))
    return locations


def _requests(url: str, job_id: str) -> list:
    with MetadataStore(url) as store:
        return store.list_control_requests(job_id)


def test_a_job_row_takes_its_owner_from_the_reservation_made_before_launch(metadata_url):
    with MetadataStore(metadata_url) as store:
        assert store.reserve_job_owner("j1", "dag_a", "manual__7") == "dag_a"
        assert store.reserve_job_owner("j1", "dag_x", "manual__8") == "dag_a"  # first wins
        job = store.create_job(job_id="j1", job_name="orders", parallelism=1)
        assert (job.dag_id, job.dag_run_id) == ("dag_a", "manual__7")
        # a reservation after the job exists never changes its owner
        assert store.reserve_job_owner("j1", "dag_x") == "dag_a"
        assert store.get_job("j1").dag_id == "dag_a"
        assert store.create_job(job_id="j2", job_name="cli", parallelism=1).dag_id is None


@pytest.mark.timeout(60)
def test_control_operators_refuse_another_dags_job_and_submit_nothing(metadata_url, tmp_path):
    _team_b_job(metadata_url, tmp_path)
    with DAG("dag_a", schedule=None, start_date=START):
        ops = [TriggerSavepointOperator(task_id="savepoint", job="team-b-job"),
               StopWithSavepointOperator(task_id="stop", job="team-b-job"),
               CancelJobOperator(task_id="cancel", job="team-b-job", missing_ok=True),
               StabilityGateOperator(task_id="gate", job="team-b-job", window=1)]
    for op in ops:
        with pytest.raises(JobOwnershipError, match=OWNED_BY_B):
            op.execute({"ti": FakeTI("dag_a", op.task_id)})
    assert _requests(metadata_url, "b1") == []


@pytest.mark.timeout(60)
def test_retention_and_dispose_refuse_another_dags_savepoints_and_delete_nothing(
        metadata_url, tmp_path):
    """The reported run: ``{"job_name": "team-b-job", "max_count": 1, "max_age_hours": 0}``
    disposed three savepoints of team B's job."""
    locations = _team_b_job(metadata_url, tmp_path, savepoints=3)
    with DAG("dag_a", schedule=None, start_date=START):
        retention = DisposeSavepointsOperator(task_id="retention", job_name="team-b-job",
                                              max_count=1, max_age_seconds=0)
        dispose = DisposeSavepointsOperator(task_id="dispose", paths=locations[:1])
        pin = PinSavepointOperator(task_id="pin", path=locations[0])
    for op in (retention, dispose, pin):
        ti = FakeTI("dag_a", op.task_id)
        with pytest.raises(JobOwnershipError, match=OWNED_BY_B):
            op.execute({"ti": ti})
        assert "retention_report" not in ti.xcom  # nothing about B's job reaches A's XComs
    assert all(os.path.isdir(loc) for loc in locations)
    with MetadataStore(metadata_url) as store:
        assert [c.status for c in store.list_checkpoints("b1")] == ["COMPLETED"] * 3
        assert store.list_savepoint_pins() == []


def test_a_dag_releases_only_its_own_pins(metadata_url, tmp_path):
    with DAG("dag_a", schedule=None, start_date=START):
        unpin = UnpinSavepointsOperator(task_id="unpin", holder="airflow:team_b/scheduled__1")
    with pytest.raises(Exception, match="belong to DAG 'team_b'"):
        unpin.execute({"ti": FakeTI("dag_a", "unpin")})


@pytest.mark.timeout(60)
def test_sensors_and_their_triggers_refuse_another_dags_job(metadata_url, tmp_path):
    _team_b_job(metadata_url, tmp_path)
    with MetadataStore(metadata_url) as store:
        request_id = store.submit_control_request("b1", "SAVEPOINT", {})
    with DAG("dag_a", schedule=None, start_date=START):
        sensors = [JobStateSensor(task_id="state", job="team-b-job", timeout=5),
                   CheckpointCompletedSensor(task_id="chk", job="team-b-job", timeout=5),
                   ControlRequestSensor(task_id="req", request_id=request_id, timeout=5)]
    for sensor in sensors:
        with pytest.raises(JobOwnershipError, match=OWNED_BY_B):
            sensor.execute({"ti": FakeTI("dag_a", sensor.task_id)})
        # deferred: the trigger carries the DAG's access and checks it in the triggerer
        trigger = sensor.trigger(end_time=2e9)
        assert trigger.serialize()[1]["access"] == {"dag_id": "dag_a", "allowed": []}

    async def first_event():
        async for event in JobStateTrigger(job="team-b-job", target_states=["FINISHED"],
                                           access={"dag_id": "dag_a", "allowed": []},
                                           poll_interval=0.1).run():
            return event.payload

    event = asyncio.run(first_event())
    assert event["status"] == "error"
    assert "belongs to DAG 'team_b'" in event["message"]


def test_the_dag_author_allows_another_dag_in_code_not_in_conf(metadata_url, tmp_path):
    _team_b_job(metadata_url, tmp_path)
    with DAG("dag_a", schedule=None, start_date=START):
        allowed = TriggerSavepointOperator(task_id="savepoint", job="team-b-job",
                                           allowed_owner_dags=["team_b"])
        with pytest.raises(TypeError, match="list of DAG ids written in the DAG file"):
            TriggerSavepointOperator(task_id="templated", job="team-b-job",
                                     allowed_owner_dags="{{ params.owners }}")
        with pytest.raises(TypeError, match="not a template"):
            TriggerSavepointOperator(task_id="templated2", job="team-b-job",
                                     allowed_owner_dags=["{{ params.owner }}"])
    assert "allowed_owner_dags" not in TriggerSavepointOperator.template_fields
    allowed.submit({"ti": FakeTI("dag_a", "savepoint")})
    assert [r.action for r in _requests(metadata_url, "b1")] == ["SAVEPOINT"]


def test_a_job_started_outside_airflow_is_reachable_from_every_dag(metadata_url):
    with MetadataStore(metadata_url) as store:
        store.create_job(job_id="c1", job_name="cli-job", parallelism=1)
        store.set_job_status("c1", "RUNNING")
    with DAG("dag_a", schedule=None, start_date=START):
        op = TriggerSavepointOperator(task_id="savepoint", job="cli-job")
    op.submit({"ti": FakeTI("dag_a", "savepoint")})
    assert [r.action for r in _requests(metadata_url, "c1")] == ["SAVEPOINT"]


@pytest.mark.timeout(60)
def test_submit_refuses_another_dags_job_name_and_standby_and_starts_nothing(metadata_url,
                                                                               tmp_path):
    _team_b_job(metadata_url, tmp_path)
    with MetadataStore(metadata_url) as store:
        store.set_job_status("b1", "FINISHED")  # not running: the name is still B's
    with DAG("dag_a", schedule=None, start_date=START):
        same_name = _submit(tmp_path)
        same_name.job_name = "team-b-job"
        standby = _submit(tmp_path, restore="standby:team-b-job", task_id="standby")
    for op in (same_name, standby):
        with pytest.raises(JobOwnershipError, match=OWNED_BY_B):
            op.execute({"ti": FakeTI("dag_a", op.task_id)})
    with MetadataStore(metadata_url) as store:
        assert [j.job_id for j in store.list_jobs()] == ["b1"]


@pytest.mark.timeout(180)
def test_a_submitted_job_belongs_to_its_dag_and_run_from_its_first_row(metadata_url,
                                                                       tmp_path):
    with DAG("dag_a", schedule=None, start_date=START):
        op = _submit(tmp_path)
    job_id = op.execute({"ti": FakeTI("dag_a", "submit", run_id="manual__42")})
    with MetadataStore(metadata_url) as store:
        job = store.get_job(job_id)
    assert (job.dag_id, job.dag_run_id) == ("dag_a", "manual__42")
    # the CLI, the operator's tool, still reaches it and says who owns it
    out = subprocess.run([sys.executable, "-m", "airflow_checkpoint_provider.engine.cli",
                          "jobs", "--db", metadata_url], capture_output=True, text=True,
                         check=True).stdout
    assert f"{job_id}  versioned-sum" in out and "owner dag_a/manual__42" in out
    rows = json.loads(subprocess.run(
        [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "jobs", "--db",
         metadata_url, "--json"], capture_output=True, text=True, check=True).stdout)
    assert rows[0]["dag_id"] == "dag_a" and rows[0]["dag_run_id"] == "manual__42"
    # another DAG cannot reconnect to it, stop it or restore its checkpoints by name
    with DAG("dag_b", schedule=None, start_date=START):
        other = _submit(tmp_path)
    with pytest.raises(JobOwnershipError, match="belongs to DAG 'dag_a'; DAG 'dag_b'"):
        other.execute({"ti": FakeTI("dag_b", "submit")})


def test_dag_access_round_trips_through_trigger_kwargs():
    access = DagAccess("dag_a", frozenset({"team_b"}))
    assert DagAccess.from_kwargs(access.serialize()) == access
    assert DagAccess.from_kwargs(None) is None
