"""Issue 36, item 1 (HITL): when the rollback guard refuses (a sink cannot remove what v2
committed, e.g. a PostgreSQL 2PC sink), DAG ``savepoint_upgrade_restore`` with
``rollback_decision`` asks a person (an Airflow HITL ``ApprovalOperator``, task
``decide_rollback``): Approve restarts v1 anyway, Reject keeps it stopped. Off (the default),
v1 stays stopped and nobody is asked. Before, the failed guard ended the run with no
decision step.

dag.test() against real jobs (local runner, the bounded example job) and a real SQLite
metadata DB; the sink's refusal is simulated (the file sink of the example can remove its
output; a PostgreSQL 2PC sink cannot, tests/integration/provider/test_provider_rollback.py has its real
refusal). ~60 s each.
"""

from __future__ import annotations

import pytest
from provider_helpers import run_dag, xcom
from test_provider_dag_blue_green import respond_when_asked
from test_provider_rollback import _bounded_v1, _conf, _lost_deferral

from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator

pytestmark = pytest.mark.usefixtures("airflow_db")
DAG_ID = "savepoint_upgrade_restore"
SINK = "'orders-2pc' (postgres(orders, 2pc))"


@pytest.fixture
def refusing_guard(monkeypatch):
    """v2's sinks cannot remove what it committed (what ``ckpt discard-output`` reports for
    a PostgreSQL 2PC sink)."""
    monkeypatch.setattr(GuardRollbackOperator, "_discard",
                        lambda self, job_id: {"refused": [SINK], "discarded": {}})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("answer", ["Approve", "Reject"])
def test_a_refused_rollback_asks_a_person_who_restarts_v1_or_keeps_it_stopped(
        airflow_db, metadata_url, store, tmp_path, monkeypatch, refusing_guard, answer):
    v1 = _bounded_v1(metadata_url, tmp_path, store, monkeypatch)
    _lost_deferral(monkeypatch, tries_lost=None)  # the rollback runs
    responder = respond_when_asked(DAG_ID, "decide_rollback", answer)

    state, tis, dr = run_dag(airflow_db, DAG_ID, _conf(tmp_path, rollback_decision=True))

    assert responder.get("answered") == answer
    assert tis["guard_rollback"] == "failed" and tis["ask_rollback"] == "success", tis
    assert state == "failed"
    refusal = xcom(dr, "guard_rollback", key="refusal")
    assert SINK in refusal and "cannot remove them" in refusal
    if answer == "Approve":
        assert tis["decide_rollback"] == tis["rollback_ok"] == tis["restart_v1"] == "success"
        again = store.get_job(xcom(dr, "restart_v1"))
        assert again.job_id != v1 and again.version == "v1", "v1 restarted anyway"
        assert again.restored_from == xcom(dr, "stop_v1")
    else:
        assert tis["decide_rollback"] == "failed", tis
        assert tis["rollback_ok"] == tis["restart_v1"] == "upstream_failed", tis
        assert xcom(dr, "restart_v1") is None, "v1 stays stopped"


@pytest.mark.timeout(300)
def test_without_rollback_decision_a_refused_rollback_asks_nobody_and_v1_stays_stopped(
        airflow_db, metadata_url, store, tmp_path, monkeypatch, refusing_guard):
    _bounded_v1(metadata_url, tmp_path, store, monkeypatch)
    _lost_deferral(monkeypatch, tries_lost=None)

    state, tis, dr = run_dag(airflow_db, DAG_ID, _conf(tmp_path))

    assert tis["guard_rollback"] == "failed" and tis["ask_rollback"] == "success", tis
    assert tis["decide_rollback"] == tis["rollback_ok"] == tis["restart_v1"] == "skipped", tis
    assert state == "failed"
