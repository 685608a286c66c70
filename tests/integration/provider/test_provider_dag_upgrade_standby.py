"""DAG savepoint_upgrade_standby end to end with dag.test() (local runner, real SQLite
metadata DB): v2 starts as a standby of the running v1 and the DAG waits for its READY
signal in the metadata DB, then stops v1 with a savepoint, which v2 restores at once
(issue 54 item 2). Checked against the generator's reference: 0 lost, 0 duplicated; the
output gap (v1's last commit to v2's first) is printed with the load average. A broken v2
is rolled back to v1 from the same savepoint; a refused stop withdraws the waiting standby
and v1 keeps running."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest
from provider_helpers import EXAMPLE, completed_checkpoints, run_dag, running_job, wait_for, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")

DAG_ID = "savepoint_upgrade_standby"
RECORDS, KEYS, RATE = 20_000, 20, 100  # v1 alone would run ~200 s: stopped long before
UPGRADED = {"check_conf": "success", "preflight": "success", "start_v2": "success",
            "stop_v1": "success", "wait_v2_checkpoint": "success", "upgraded": "success",
            "cancel_v2": "skipped", "guard_rollback": "skipped", "restart_v1": "skipped",
            "ask_rollback": "skipped", "decide_rollback": "skipped", "rollback_ok": "skipped"}
ROLLED_BACK = {**UPGRADED, "wait_v2_checkpoint": "failed", "upgraded": "upstream_failed",
               "cancel_v2": "success", "guard_rollback": "success", "restart_v1": "success",
               "rollback_ok": "success"}


@pytest.fixture(autouse=True)
def _bounded_example(monkeypatch):
    monkeypatch.setenv("CKPT_EXAMPLE_RECORDS", str(RECORDS))
    monkeypatch.setenv("CKPT_EXAMPLE_KEYS", str(KEYS))
    monkeypatch.setenv("CKPT_EXAMPLE_RATE", str(RATE))
    monkeypatch.setenv("CKPT_EXAMPLE_INTERVAL_MS", "500")
    monkeypatch.setenv("CKPT_EXAMPLE_FAIL_AFTER_S", "5")


def _conf(tmp_path, **overrides) -> dict:
    # every param, every time: dag.test() keeps a run's conf in the shared DAG object's params
    conf = {"job_name": "versioned-sum", "v1_pipeline": f"{EXAMPLE}:build_v1",
            "v2_pipeline": f"{EXAMPLE}:build_v2",
            "savepoint_dir": str(tmp_path / "example" / "savepoints"), "runner": "local",
            # v2 (started by the DAG) reads the rest of the bounded input fast
            "job_env": {"CKPT_EXAMPLE_RATE": 4000}, "upgrade_mode": "savepoint",
            "max_checkpoint_age_s": None}
    conf.update(overrides)
    return conf


def _withdraw(store, dr) -> None:
    """A standby left waiting must not outlive its test."""
    job_id = xcom(dr, "start_v2", key="job_id") if dr is not None else None
    if job_id:
        store.request_standby_cancel(job_id)


def _commit_times(out: str, job_id: str) -> list[float]:
    return sorted(os.stat(os.path.join(out, n)).st_mtime for n in os.listdir(out)
                  if n.startswith("part-") and f"~{job_id}~" in n)


def lost_and_duplicated(out: str) -> dict:
    """The committed output against the failure-free run: per key the running count goes
    1..n once, n from the bounded generator (the example's seed and splits)."""
    from airflow_checkpoint_provider.engine import GeneratorSource, read_committed

    src = GeneratorSource(RECORDS, num_keys=KEYS, seed=42, splits=2)
    expected = Counter(src.record(i)["key"] for i in range(RECORDS))
    seen: dict[str, Counter] = defaultdict(Counter)
    for r in read_committed(out):
        seen[r["key"]][r["count"]] += 1
    return {"lost": sum(1 for k, n in expected.items() for i in range(1, n + 1)
                        if i not in seen[k]),
            "duplicated": sum(n - 1 for c in seen.values() for n in c.values() if n > 1),
            "unexpected": sum(1 for k, c in seen.items() for i in c if i > expected.get(k, 0))}


def _upgrade_exactly_once(airflow_db, metadata_url, store, tmp_path, dag_id: str):
    """Run ``dag_id``'s upgrade of a running v1; check v2 restored v1's stop savepoint and
    the output against the reference; print the output gap. Returns (v1, v2, savepoint)."""
    v1 = running_job(metadata_url, tmp_path, store)
    dr = None
    try:
        state, tis, dr = run_dag(airflow_db, dag_id, _conf(tmp_path))
        assert tis == UPGRADED, tis  # the same tasks and states; the order differs
        assert state == "success"
        v2 = xcom(dr, "start_v2")
        savepoint = xcom(dr, "stop_v1")
        v2_job = store.get_job(v2)
        assert v2_job.version == "v2" and v2_job.restored_from == savepoint
        assert store.get_job(v1).status == "STOPPED"
        assert completed_checkpoints(store, v2)
        wait_for(lambda: store.get_job(v2).status == "FINISHED", 120, "v2 to finish")
        out = str(tmp_path / "example" / "output")
        gap = _commit_times(out, v2)[0] - _commit_times(out, v1)[-1]
        result = lost_and_duplicated(out)
        print(f"{dag_id} through Airflow (dag.test, local runner): output gap "
              f"{gap:.2f} s, {result}, load average {os.getloadavg()[0]:.1f}")
        assert result == {"lost": 0, "duplicated": 0, "unexpected": 0}
        return v1, v2, savepoint
    finally:
        _withdraw(store, dr)


@pytest.mark.timeout(300)
def test_standby_upgrade_waits_for_ready_then_v2_restores_the_stop_savepoint_exactly_once(
        airflow_db, metadata_url, store, tmp_path):
    v1, v2, savepoint = _upgrade_exactly_once(airflow_db, metadata_url, store, tmp_path,
                                              DAG_ID)
    standby = store.get_standby(v2)
    # the DAG stopped v1 only after the standby said READY: its request came later
    [stop] = [r for r in store.list_control_requests(v1)
              if r.action == "STOP_WITH_SAVEPOINT" and r.status == "SUCCEEDED"]
    assert standby.ready_at < stop.created_at, (standby, stop)
    assert standby.status == "TAKEN_OVER" and standby.waits_for_job_id == v1
    assert standby.restore_location == savepoint


@pytest.mark.timeout(300)
def test_upgrade_without_standby_is_exactly_once_too(airflow_db, metadata_url, store,
                                                      tmp_path):
    """The same upgrade with ``savepoint_upgrade_restore`` (v2 submitted after v1 stopped):
    the A/B comparison of the output gap, and no standby involved."""
    _, v2, _ = _upgrade_exactly_once(airflow_db, metadata_url, store, tmp_path,
                                     "savepoint_upgrade_restore")
    assert store.get_standby(v2) is None


@pytest.mark.timeout(300)
def test_broken_v2_after_the_handover_is_rolled_back_to_v1_from_the_same_savepoint(
        airflow_db, metadata_url, store, tmp_path):
    v1 = running_job(metadata_url, tmp_path, store)
    dr = None
    try:
        state, tis, dr = run_dag(airflow_db, DAG_ID,
                                 _conf(tmp_path, v2_pipeline=f"{EXAMPLE}:build_v2_broken"))
        assert tis == ROLLED_BACK, tis
        assert state == "failed"
        savepoint = xcom(dr, "stop_v1")
        v2_job = store.get_job(xcom(dr, "start_v2", key="job_id"))
        assert v2_job.status in ("FAILED", "CANCELED") and v2_job.restored_from == savepoint
        v1_again = store.get_job(xcom(dr, "restart_v1"))
        assert v1_again.job_id != v1 and v1_again.version == "v1"
        assert v1_again.restored_from == savepoint
        # v1 restarted at the run's job_env rate: it reads the rest of the input and ends;
        # the broken v2 committed nothing, so the output is exactly once
        wait_for(lambda: store.get_job(v1_again.job_id).status == "FINISHED", 120,
                 "v1 to finish")
        out = str(tmp_path / "example" / "output")
        assert not _commit_times(out, v2_job.job_id)
        assert lost_and_duplicated(out) == {"lost": 0, "duplicated": 0, "unexpected": 0}
    finally:
        _withdraw(store, dr)
