"""The test harness's run_dag: what it changes for a run (short retry delays, no re-sync of
the DAG folder) it changes only during the run, on the session's DAG objects."""

from __future__ import annotations

import pytest
from provider_helpers import TEST_RETRY_DELAY, _no_dag_folder_resync, _short_retry_delays

from airflow_checkpoint_provider.workflows.upgrade import CONTROL_RETRIES

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_retry_delays_are_short_during_a_run_and_the_dags_own_afterwards(airflow_db):
    dag = airflow_db.get_dag("blue_green_upgrade")
    stop_blue = dag.get_task("stop_blue")
    own = CONTROL_RETRIES["retry_delay"]  # the workflows' own (1 s), not the harness's
    assert stop_blue.retries == 2 and stop_blue.retry_delay == own != TEST_RETRY_DELAY
    with pytest.raises(RuntimeError, match="the run failed"), _short_retry_delays(dag):
        assert stop_blue.retry_delay == TEST_RETRY_DELAY
        # what dag.test() runs: a copy through serialization keeps the short delay
        from airflow.serialization.serialized_objects import DagSerialization

        copy = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
        assert copy.get_task("stop_blue").retry_delay == TEST_RETRY_DELAY
        raise RuntimeError("the run failed")
    assert stop_blue.retry_delay == own


def test_the_dag_folder_is_synced_once_per_session_not_per_run(airflow_db):
    import airflow.dag_processing.dagbag as dagbag
    from airflow.models.dag_version import DagVersion

    real = dagbag.sync_bag_to_db
    with _no_dag_folder_resync():
        assert dagbag.sync_bag_to_db is not real
        # dag.test() stops looking once the DAG has a version: the session fixture wrote it
        assert DagVersion.get_version("blue_green_upgrade") is not None
    assert dagbag.sync_bag_to_db is real
