"""CutOverOperator (issue 54 item 2): blue's stop-with-savepoint and the fenced green's
in-place promotion in one deferrable step, against real local jobs and a real SQLite metadata
DB. A retry (Airflow's lost-task-instance race killed the first try) re-attaches to the first
try's requests instead of submitting others; the output is exactly once."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from provider_helpers import (
    EXAMPLE,
    completed_checkpoints,
    events,
    running_job,
    start_job,
    wait_for,
)
from savepoint_helpers import FakeTI

from airflow_checkpoint_provider.operators.cutover import CutOverOperator
from airflow_checkpoint_provider.operators.promote import PromoteInPlaceOperator
from airflow_checkpoint_provider.triggers.cutover import CutOverTrigger

DAG, RUN = "blue_green_upgrade", "manual__cutover"


def _savepoint(store, job_id: str) -> str:
    request = store.submit_control_request(job_id, "SAVEPOINT", {})
    wait_for(lambda: store.get_control_request(request).is_done, 60, "the hand-over savepoint")
    done = store.get_control_request(request)
    assert done.status == "SUCCEEDED", done
    return done.result["location"]


def _blue_and_fenced_green(metadata_url, tmp_path, store) -> tuple[str, str]:
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")
    green = start_job(metadata_url, tmp_path, pipeline=f"{EXAMPLE}:build_v2",
                      job_name="sum-green", fence_sinks=True,
                      restore=_savepoint(store, blue))
    wait_for(lambda: completed_checkpoints(store, green), 60, "a fenced checkpoint of green")
    return blue, green


def _actions(store, job_id: str) -> list[tuple[str, str]]:
    """The job's control requests but the test's own hand-over savepoint."""
    return sorted((r.action, r.status) for r in store.list_control_requests(job_id)
                  if r.action != "SAVEPOINT")


def _exactly_once(example_dir) -> tuple[int, int, int]:
    from airflow_checkpoint_provider.engine import read_committed

    counts: dict[str, list[int]] = defaultdict(list)
    for r in read_committed(str(example_dir / "output")):
        counts[r["key"]].append(r["count"])
    duplicates = sum(len(c) - len(set(c)) for c in counts.values())
    missing = sum(max(c) - len(set(c)) for c in counts.values())
    return sum(map(len, counts.values())), duplicates, missing


def _operator(**kwargs) -> CutOverOperator:
    return CutOverOperator(task_id="stop_blue", job="sum-blue", green_job="sum-green",
                           report_dir=None, emit_asset=False, pin_seconds=None, **kwargs)


@pytest.mark.timeout(240)
def test_one_deferral_stops_blue_promotes_green_and_commits_green_at_once(
        metadata_url, store, tmp_path):
    from airflow.sdk.exceptions import TaskDeferred

    blue, green = _blue_and_fenced_green(metadata_url, tmp_path, store)
    ti = FakeTI(DAG, "stop_blue", RUN)
    with pytest.raises(TaskDeferred) as deferred:
        _operator(deferrable=True).execute({"ti": ti})
    trigger = deferred.value.trigger
    assert isinstance(trigger, CutOverTrigger) and trigger.green_job_id == green
    # the task submitted green's PROMOTE itself, the moment blue's savepoint completed: no
    # deferral (3-5 s on a loaded deployment) lies between blue's last commit and green's
    # restore
    assert "PROMOTE" in [r.action for r in store.list_control_requests(green)]
    # the trigger survives its serialization (the triggerer rebuilds it from these kwargs)
    path, kwargs = trigger.serialize()
    assert path == "airflow_checkpoint_provider.triggers.cutover.CutOverTrigger"
    [event] = events(CutOverTrigger(**kwargs))
    assert event["status"] == "success" and event["promoted"] is True, event

    savepoint = _operator(deferrable=True).cutover_complete({"ti": ti}, event)
    assert ti.xcom["promoted"] is True and ti.xcom["savepoint_path"] == savepoint
    assert store.get_job(blue).status == "STOPPED"
    live = store.get_job(green)
    assert live.status == "RUNNING" and live.restored_from == savepoint
    # one request of each kind: the stop, the promotion, green's first commit right after
    assert _actions(store, blue) == [("STOP_WITH_SAVEPOINT", "SUCCEEDED")]
    wait_for(lambda: store.get_control_request(event["checkpoint_request_id"]).is_done, 60,
             "green's first checkpoint after the promotion")
    assert _actions(store, green) == [("CHECKPOINT", "SUCCEEDED"), ("PROMOTE", "SUCCEEDED")]
    first = store.get_control_request(event["checkpoint_request_id"]).result["checkpoint_id"]
    assert first > store.get_checkpoint(blue, event["checkpoint_id"]).checkpoint_id

    # the DAG's promote_green task only reads what the cut-over did
    promote_ti = FakeTI(DAG, "promote_green", RUN)
    assert PromoteInPlaceOperator(task_id="promote_green", job=green, snapshot=savepoint,
                                  promoted_by="True").execute({"ti": promote_ti}) is True
    assert _actions(store, green) == [("CHECKPOINT", "SUCCEEDED"), ("PROMOTE", "SUCCEEDED")]

    wait_for(lambda: [n for n in os.listdir(tmp_path / "example" / "output") if green in n],
             60, "green's output")
    rows, duplicates, missing = _exactly_once(tmp_path / "example")
    assert rows > 0 and (duplicates, missing) == (0, 0)


@pytest.mark.timeout(240)
def test_a_retry_after_a_lost_first_try_reattaches_to_its_stop_and_promotion(
        metadata_url, store, tmp_path):
    """Try 1 submitted the stop and deferred, then Airflow lost it (``404 Task Instance not
    found``); the cut-over went on in the jobs meanwhile. Try 2 submits nothing new: it finds
    the stop and the promotion (which try 1 submitted before it deferred) by their
    idempotency keys, and ends with the same savepoint."""
    from airflow.sdk.exceptions import TaskDeferred

    blue, green = _blue_and_fenced_green(metadata_url, tmp_path, store)
    first = FakeTI(DAG, "stop_blue", RUN, try_number=1)
    with pytest.raises(TaskDeferred) as deferred:
        _operator(deferrable=True).execute({"ti": first})
    stop_id = deferred.value.trigger.stop_request_id
    wait_for(lambda: store.get_control_request(stop_id).is_done, 60, "blue's stop savepoint")

    second = FakeTI(DAG, "stop_blue", RUN, try_number=2)
    savepoint = _operator(deferrable=False, timeout=120).execute({"ti": second})

    assert second.xcom["request_id"] == first.xcom["request_id"] == stop_id
    assert savepoint == store.get_control_request(stop_id).result["location"]
    assert second.xcom["promoted"] is True
    assert _actions(store, blue) == [("STOP_WITH_SAVEPOINT", "SUCCEEDED")]
    assert [a for a, _ in _actions(store, green)] == ["CHECKPOINT", "PROMOTE"]
    # a third try (another race after success) asks nothing again either
    third = FakeTI(DAG, "stop_blue", RUN, try_number=3)
    assert _operator(deferrable=True).execute({"ti": third}) == savepoint
    assert third.xcom["promoted"] is True
    assert [a for a, _ in _actions(store, green)] == ["CHECKPOINT", "PROMOTE"]
    assert store.get_job(green).status == "RUNNING"
    assert store.get_job(green).restored_from == savepoint


@pytest.mark.timeout(240)
def test_a_retry_that_finds_green_restoring_its_promotion_reattaches_to_it(
        metadata_url, store, tmp_path, monkeypatch):
    """Try 2 reads green while green restores blue's savepoint in place after the PROMOTE of
    try 1 (RESTARTING, not RUNNING): it reattaches to that promotion, it does not stop blue
    alone and leave ``promoted`` unset (seen in a loaded CI run)."""
    from dataclasses import replace

    from airflow.sdk.exceptions import TaskDeferred

    from airflow_checkpoint_provider.hooks.metadata import CheckpointMetadataHook

    blue, green = _blue_and_fenced_green(metadata_url, tmp_path, store)
    first = FakeTI(DAG, "stop_blue", RUN, try_number=1)
    with pytest.raises(TaskDeferred):
        _operator(deferrable=True).execute({"ti": first})
    key = CutOverOperator.idempotency_key({"ti": first})
    wait_for(lambda: store.find_control_request(f"{key}:promote"), 60, "try 1's PROMOTE")
    found = CheckpointMetadataHook.find_job

    def restoring(self, job):
        record = found(self, job)
        return replace(record, status="RESTARTING") if job == "sum-green" else record

    monkeypatch.setattr(CheckpointMetadataHook, "find_job", restoring)
    second = FakeTI(DAG, "stop_blue", RUN, try_number=2)
    savepoint = _operator(deferrable=False, timeout=120).execute({"ti": second})
    assert second.xcom["promoted"] is True
    assert [a for a, _ in _actions(store, green)] == ["CHECKPOINT", "PROMOTE"]
    assert store.get_job(green).restored_from == savepoint
    assert _actions(store, blue) == [("STOP_WITH_SAVEPOINT", "SUCCEEDED")]


@pytest.mark.timeout(240)
def test_a_green_that_is_not_fenced_refuses_and_blue_still_stops(metadata_url, store, tmp_path):
    """A refused promotion (green publishes already, so restoring blue's savepoint in it
    would duplicate output): the task succeeds with the savepoint and ``promoted=False``
    once blue is STOPPED, the DAG's resubmit path takes over; green runs on untouched."""
    blue = running_job(metadata_url, tmp_path, store, job_name="sum-blue")
    green = start_job(metadata_url, tmp_path, pipeline=f"{EXAMPLE}:build_v2",
                      job_name="sum-green", restore=_savepoint(store, blue))
    ti = FakeTI(DAG, "stop_blue", RUN)
    savepoint = _operator(deferrable=False, timeout=120).execute({"ti": ti})

    assert ti.xcom["promoted"] is False and "not fenced" in ti.xcom["not_promoted_reason"]
    assert store.get_job(blue).status == "STOPPED"
    assert savepoint == ti.xcom["savepoint_path"]
    assert _actions(store, green) == [("PROMOTE", "FAILED")]
    assert store.get_job(green).status == "RUNNING"
    promote_ti = FakeTI(DAG, "promote_green", RUN)
    assert PromoteInPlaceOperator(task_id="promote_green", job=green, snapshot=savepoint,
                                  promoted_by="False").execute({"ti": promote_ti}) is False
    assert _actions(store, green) == [("PROMOTE", "FAILED")]
