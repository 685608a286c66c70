"""A custom operator that defers to one of the provider's triggers (docs: DAG guide)."""
from datetime import datetime

from airflow.sdk import DAG, BaseOperator

from airflow_checkpoint_provider.triggers.checkpoint import CheckpointCompletedTrigger


# --8<-- [start:trigger]
class WaitForSavepoint(BaseOperator):
    """Defer until job ``job`` has completed a savepoint, then return its location."""

    def __init__(self, *, job: str, **kwargs):
        super().__init__(**kwargs)
        self.job = job

    def execute(self, context):
        self.defer(trigger=CheckpointCompletedTrigger(job=self.job, kind="SAVEPOINT",
                                                      poll_interval=5.0),
                   method_name="done")

    def done(self, context, event):
        if event["status"] != "success":
            raise RuntimeError(event.get("message", event))
        return event["location"]
# --8<-- [end:trigger]


with DAG("trigger_examples", schedule=None, start_date=datetime(2026, 1, 1)):
    WaitForSavepoint(task_id="wait", job="orders")
