"""The Spark runner on real Spark: local mode and a 2-worker standalone cluster."""

import os
import signal
import threading
import time

import pyspark
import pytest
from pipelines import FaultPlan, check_exactly_once, expected_running_sums, running_sum_pipeline

from airflow_checkpoint_provider.engine import ConfigurationError, RestartStrategy
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.runners.spark import session_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spark_env")]

N, KEYS, SEED = 20_000, 50, 7


@pytest.fixture(scope="module")
def local4():
    """One local[4] session for the module's two jobs on it (a session start is 10-30 s);
    neither kills a Spark process, and each job ends before the next starts."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # what the spark_env fixture sets per test
        spark = session_for("local[4]", "test-local4")
        yield spark
        spark.stop()


def test_pyspark_python_package_matches_the_jars():
    jars = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    core = next(j for j in jars if j.startswith("spark-core_"))
    assert core.endswith(f"-{pyspark.__version__}.jar"), (core, pyspark.__version__)


@pytest.mark.timeout(300)
def test_failure_injection_on_local4_commits_exactly_once(workdir, local4):
    faults = FaultPlan(
        str(workdir / "faults"),
        [("record", 700), ("snapshot", 2), ("notify", 3), ("record", 15000)],
    )
    p = running_sum_pipeline(
        str(workdir),
        num_records=N,
        num_keys=KEYS,
        seed=SEED,
        faults=faults,
        rate=5000,
        interval_ms=200,
        initial_delay_ms=500,
    )
    result = p.run("spark", spark=local4)
    assert result.status == "FINISHED"
    assert len(faults.fired()) == 4 and result.restarts == len(faults.attempts_hit())
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    job = MetadataStore(p.metadata_url).get_job(result.job_id)
    assert job.spark_app_id == local4.sparkContext.applicationId


@pytest.mark.timeout(120)
def test_more_slots_than_cores_fails_fast_with_a_clear_message(workdir):
    spark = session_for("local[2]", "test-local2")
    try:
        p = running_sum_pipeline(str(workdir), keyed_parallelism=3)
        t0 = time.monotonic()
        with pytest.raises(ConfigurationError, match="needs 3 slots .* offers 2 cores"):
            p.run("spark", spark=spark)
        assert time.monotonic() - t0 < 10
    finally:
        spark.stop()


@pytest.mark.timeout(420)
def test_standalone_cluster_survives_a_killed_executor_exactly_once(workdir, spark_cluster):
    spark = session_for(
        spark_cluster.url,
        "test-standalone",
        extra_conf={"spark.executor.memory": "512m", "spark.cores.max": "4"},
    )
    try:
        # both workers' executors registered before the job starts (a failure-free run of
        # the whole job used to wait for them: ~10 CPU-s for what the killed run checks
        # again, against the same expected sums; tests/integration/provider/test_submit_to_cluster.py
        # runs failure-free jobs on this cluster)
        tracker = spark.sparkContext._jsc.sc().statusTracker()
        deadline = time.monotonic() + 120
        while len(tracker.getExecutorInfos()) < 3 and time.monotonic() < deadline:  # + driver
            time.sleep(0.2)
        assert len(tracker.getExecutorInfos()) == 3, "an executor on each of the 2 workers"
        expected = expected_running_sums(N, KEYS, SEED)

        p = running_sum_pipeline(
            str(workdir / "kill"),
            num_records=N,
            num_keys=KEYS,
            seed=SEED,
            rate=2500,
            interval_ms=200,
            restart=RestartStrategy.fixed_delay(attempts=10, delay_ms=1000),
        )
        outcome = {}
        t = threading.Thread(
            target=lambda: outcome.setdefault("result", p.run("spark", spark=spark))
        )
        t.start()
        store = MetadataStore(p.metadata_url)
        deadline = time.monotonic() + 120
        killed = None
        while time.monotonic() < deadline and killed is None:
            jobs = store.list_jobs()
            if jobs and any(
                c.status in ("COMPLETED", "SUBSUMED")
                for c in store.list_checkpoints(jobs[0].job_id)
            ):
                pids = spark_cluster.executor_pids(spark.sparkContext.applicationId)
                if pids:
                    killed = pids[0]
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.2)
        assert killed, "no executor to kill"
        t.join(300)
        result = outcome["result"]
        assert result.status == "FINISHED" and result.restarts >= 1
        check_exactly_once(str(workdir / "kill" / "out"), expected)
        attempts = store.list_attempts(result.job_id)
        assert len(attempts) == result.restarts + 1 and attempts[0].failure_reason
    finally:
        spark.stop()


@pytest.mark.timeout(300)
def test_stop_with_savepoint_then_restore_v2_on_spark_loses_and_duplicates_nothing(workdir, local4):
    from pipelines import Background, versioned_pipeline

    v1 = versioned_pipeline(str(workdir), "v1", num_records=N, rate=3000)
    bg = Background(v1, runner="spark", spark=local4)
    job = bg.wait_running(min_checkpoints=1, timeout=120)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"directory": str(workdir / "sp")})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    v2 = versioned_pipeline(str(workdir), "v2", num_records=N, keyed_parallelism=3)
    result = v2.run(
        "spark", spark=local4, restore=req.result["location"], allow_non_restored_state=True
    )
    assert result.status == "FINISHED"
    check_exactly_once(str(workdir / "out"), expected_running_sums(N, KEYS, SEED))
    new_job = MetadataStore(v2.metadata_url).get_job(result.job_id)
    assert new_job.restored_from == req.result["location"] and new_job.version == "v2"
