"""Blue-green upgrade of a Kafka-to-Kafka job, gated on green having caught up with Kafka.

The blue-green workflow (:func:`airflow_checkpoint_provider.workflows.blue_green_upgrade`)
on the example Kafka job (``airflow_checkpoint_provider.examples.kafka_sum``: a keyed
running sum from one topic to another, exactly once), plus one gate: ``caught_up``, a
:class:`~airflow_checkpoint_provider.sensors.kafka.KafkaCaughtUpSensor`.

savepoint of blue (``savepoint_blue``: it holds blue's read offsets of every partition) ->
pre-flight (green's pipeline restores it) -> green starts from it *fenced*
(``start_green``): it reads from blue's offsets and checkpoints, its ``KafkaSink`` publishes
nothing and its source commits no group offsets -> two gates: ``health_gate`` (green stays
RUNNING, completes checkpoints) and ``caught_up`` (green's consumer lag, summed over every
partition, at most ``max_lag`` records at every completed checkpoint over
``caught_up_for_s`` seconds) -> cut-over: blue stops with a savepoint, green restores it in
place and publishes from there (``promote_green``). Green's first published epoch starts at
the offsets where blue's last published one ended: the output topic, read with
``read_committed``, holds every input record's result once -- no duplicate, none missing.

If a gate fails (green fell behind, ended or restarted), green is cancelled and blue keeps
running (``cancel_green``, ``keep_blue``).

The broker and the topics are the worker's environment (``CKPT_KAFKA_BOOTSTRAP``,
``CKPT_KAFKA_INPUT``, ``CKPT_KAFKA_OUTPUT``), never a run's conf; the conf chooses the
version (``green_pipeline``), job names, the gates' bounds and the example's bounded
options (``job_env``: interval, parallelism, a slow-down per record).
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from airflow_checkpoint_provider.params import (
    EXAMPLE_DAGS,
    EXAMPLE_ENV,
    example_savepoint_roots,
)
from airflow_checkpoint_provider.sensors.kafka import KafkaCaughtUpSensor
from airflow_checkpoint_provider.workflows import StabilityGate, blue_green_upgrade

EXAMPLE = "airflow_checkpoint_provider.examples.kafka_sum"
PIPELINES = (f"{EXAMPLE}:build_v1", f"{EXAMPLE}:build_v2")
GREEN_JOB_ID = "{{ ti.xcom_pull(task_ids='start_green', key='job_id') }}"
#: how long green may take to catch up before the upgrade is abandoned
CAUGHT_UP_TIMEOUT_S = 1800
#: the caught-up gate's params (bounded: a run's conf is untrusted)
CAUGHT_UP_PARAMS = {
    "max_lag": Param(0, type="integer", minimum=0, maximum=10_000_000,
                     description="green's total Kafka consumer lag allowed at the cut-over "
                                 "(records)"),
    "caught_up_for_s": Param(2, type="number", minimum=0, maximum=3_600,
                             description="seconds the lag must stay within max_lag"),
}

with DAG(
    dag_id="kafka_blue_green",
    description="blue-green upgrade of a Kafka-to-Kafka job, cut over once green caught up",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade", "kafka"],
    render_template_as_native_obj=True,
    params=CAUGHT_UP_PARAMS,
) as dag:
    blue_green_upgrade(
        pipelines=PIPELINES, green=f"{EXAMPLE}:build_v2",
        job_names=("kafka-sum-blue", "kafka-sum-green"), any_job_name=True,
        # green catching up reads faster than blue: no throughput ratio; the lag gate decides
        gate=StabilityGate(window_s=5, min_checkpoints=2, min_throughput_ratio=None),
        job_env=EXAMPLE_ENV, savepoint_roots=example_savepoint_roots,
        allowed_owner_dags=EXAMPLE_DAGS)
    caught_up = KafkaCaughtUpSensor(
        task_id="caught_up", job=GREEN_JOB_ID, max_lag="{{ params.max_lag }}",
        for_seconds="{{ params.caught_up_for_s }}",
        timeout=CAUGHT_UP_TIMEOUT_S, poke_interval=1.0, deferrable=True,
        allowed_owner_dags=EXAMPLE_DAGS)
    # next to the stability gate: green started -> caught_up -> the cut-over (stop_blue runs
    # only when neither gate failed); a failed catch-up cancels green, blue keeps running
    dag.get_task("start_green") >> caught_up >> dag.get_task("stop_blue")
    caught_up >> dag.get_task("cancel_green")
