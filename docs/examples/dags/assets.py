"""Scheduling on the provider's assets, event triggers and deadlines (docs: DAG guide)."""
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_checkpoint_provider.assets import savepoint_asset
from airflow_checkpoint_provider.deadlines import checkpoint_age_deadline
from airflow_checkpoint_provider.sensors.checkpoint import CheckpointCompletedSensor
from airflow_checkpoint_provider.triggers.events import CheckpointCommittedEventTrigger

# --8<-- [start:savepoint-asset]
with DAG("verify_orders_savepoints", schedule=savepoint_asset("orders")):
    @task
    def check(**context):
        for events in context["triggering_asset_events"].values():
            for e in events:
                print(e.extra["checkpoint_id"], e.extra["location"])
    check()
# --8<-- [end:savepoint-asset]

# --8<-- [start:watcher]
committed = Asset("orders-committed", watchers=[AssetWatcher(
    name="orders-checkpoints",
    trigger=CheckpointCommittedEventTrigger(job_name="orders", poll_interval=5.0))])

with DAG("on_orders_committed", schedule=[committed]):
    @task
    def read_committed(triggering_asset_events=None):
        return [e.extra.get("payload", {}) for events in triggering_asset_events.values()
                for e in events]
    read_committed()
# --8<-- [end:watcher]

# --8<-- [start:deadline]
with DAG("orders_freshness", schedule=timedelta(minutes=10), start_date=datetime(2026, 1, 1),
         catchup=False, deadline=checkpoint_age_deadline("orders", timedelta(minutes=5))):
    CheckpointCompletedSensor(task_id="fresh", job="orders", after_time="{{ ts }}",
                              deferrable=True, timeout=3600)
# --8<-- [end:deadline]
