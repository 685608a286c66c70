"""Every operator of the provider, one task each (docs: the DAG author's guide).

Not a workflow to run as is: the tasks are independent examples of each operator's
parameters; the example DAGs in dags/ chain them into real workflows.
"""
from datetime import datetime

from airflow.sdk import DAG

from airflow_checkpoint_provider.operators.cdc import CopyCdcSlotsOperator, DropCdcSlotOperator
from airflow_checkpoint_provider.operators.control import (
    CancelJobOperator,
    StopWithSavepointOperator,
    TriggerSavepointOperator,
)
from airflow_checkpoint_provider.operators.cutover import CutOverOperator
from airflow_checkpoint_provider.operators.promote import PromoteInPlaceOperator
from airflow_checkpoint_provider.operators.rollback import GuardRollbackOperator
from airflow_checkpoint_provider.operators.savepoints import (
    DisposeSavepointsOperator,
    PinSavepointOperator,
    UnpinSavepointsOperator,
)
from airflow_checkpoint_provider.operators.stability import StabilityGateOperator
from airflow_checkpoint_provider.operators.submit import SubmitCheckpointedJobOperator
from airflow_checkpoint_provider.operators.upgrade import (
    HandoverSnapshotOperator,
    StopForUpgradeOperator,
)
from airflow_checkpoint_provider.operators.verify import VerifyRestoreOperator

PIPELINE = "airflow_checkpoint_provider.examples.versioned_sum"

with DAG("operator_examples", schedule=None, start_date=datetime(2026, 1, 1)):
    # --8<-- [start:submit]
    # Long-running job: start detached, succeed once RUNNING (XCom: job_id). If a job of
    # this name already runs with a fresh heartbeat, the task attaches to it instead.
    start = SubmitCheckpointedJobOperator(
        task_id="start", pipeline=f"{PIPELINE}:build_v1", job_name="orders",
        restore="latest",                 # or a savepoint path, or None
        wait_for="running",               # or "first_checkpoint" | "finished"
        env_vars={"ORDERS_TOPIC": "orders"}, conf={"spark.executor.memory": "2g"})

    # Bounded job: run to the end; a retry resumes from the failed try's latest checkpoint.
    batch = SubmitCheckpointedJobOperator(
        task_id="batch", pipeline="airflow_checkpoint_provider.examples.flaky_batch:build",
        job_name="backfill", wait_for="finished", deferrable=True, retries=2)
    # --8<-- [end:submit]

    # --8<-- [start:control]
    savepoint = TriggerSavepointOperator(task_id="savepoint", job="orders",
                                         directory="/data/savepoints")  # XCom: the path
    stop = StopWithSavepointOperator(task_id="stop", job="orders", drain=False,
                                     pin_seconds=86400)                 # XCom: the path
    cancel = CancelJobOperator(task_id="cancel", job="orders", missing_ok=True)
    # --8<-- [end:control]

    # --8<-- [start:retention]
    retention = DisposeSavepointsOperator(task_id="retention", job_name="orders",
                                          max_count=24, max_age_seconds=3 * 86400)
    pin = PinSavepointOperator(task_id="pin", path="{{ ti.xcom_pull('stop') }}",
                               ttl_seconds=86400, reason="v2 rollout")
    unpin = UnpinSavepointsOperator(task_id="unpin", trigger_rule="all_done")
    # --8<-- [end:retention]

    # --8<-- [start:upgrade]
    check = VerifyRestoreOperator(task_id="verify_v2", pipeline=f"{PIPELINE}:build_v2",
                                  job_name="orders", take_savepoint=True)
    stop_v1 = StopForUpgradeOperator(task_id="stop_v1", job="orders",
                                     upgrade_mode="savepoint-or-last-state",
                                     max_checkpoint_age=600)
    handover = HandoverSnapshotOperator(task_id="handover", job="orders-blue",
                                        handover="last-state", max_checkpoint_age=120)
    # --8<-- [end:upgrade]

    # --8<-- [start:promote]
    # Blue-green cut-over in one task: blue stops with a savepoint, the fenced green restores
    # it in place as soon as it completed (XCom: the savepoint; key "promoted": True/False/None).
    cutover = CutOverOperator(task_id="stop_blue", job="orders-blue", green_job="orders-green",
                              upgrade_mode="savepoint", deferrable=True)
    # Reads what the cut-over did; promotes green itself when the cut-over did not try
    # (e.g. a last-state cut-over). Returns False, never fails, when green refused.
    promote = PromoteInPlaceOperator(
        task_id="promote_green", job="orders-green",
        snapshot="{{ ti.xcom_pull(task_ids='stop_blue') }}",
        promoted_by="{{ ti.xcom_pull(task_ids='stop_blue', key='promoted') }}")
    # Before v1 restarts from the snapshot v2 restored: remove what v2 committed, or fail
    # naming the sinks that cannot (v2 must have ended).
    guard = GuardRollbackOperator(task_id="guard_rollback",
                                  job="{{ ti.xcom_pull(task_ids='start', key='job_id') }}",
                                  pipeline=f"{PIPELINE}:build_v2")
    # --8<-- [end:promote]

    # --8<-- [start:gate]
    gate = StabilityGateOperator(task_id="health_gate", job="orders-green",
                                 baseline_job="orders-blue", window=120, min_checkpoints=3,
                                 max_checkpoint_duration_ms=30_000, min_throughput_ratio=0.8,
                                 deferrable=True)
    # --8<-- [end:gate]

    # --8<-- [start:cdc]
    drop_slot = DropCdcSlotOperator(task_id="drop_slot", job_name="orders-cdc",
                                    postgres_conn_id="shop_db")
    # blue-green of a CDC job, before blue's hand-over snapshot: green's slots copy blue's
    copy_slots = CopyCdcSlotsOperator(task_id="copy_cdc_slots",
                                      pipeline="airflow_checkpoint_provider.examples.postgres_cdc:build",
                                      blue_job="orders-cdc-blue", green_job="orders-cdc-green")
    # --8<-- [end:cdc]
