"""DeltaSink: exactly-once appends through Delta application transactions under seeded
failures (exceptions, SIGKILLed slots, a failure between the checkpoint and the commit, a
failed snapshot), compared with the failure-free result; refusals of bad input."""

import pytest
from deltalake import DeltaTable
from pipelines import (
    Background,
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    CorruptCheckpointError,
    JobFailedError,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.connectors.lakehouse.delta import DeltaSink

N, KEYS, SEED = 12_000, 40, 7
pytestmark = pytest.mark.slow
FAULTS = [("record", 1_500), ("kill", 5_000), ("notify", 3), ("snapshot", 5), ("kill", 9_500)]


@pytest.mark.timeout(300)
def test_every_row_is_appended_exactly_once_under_failures(workdir):
    faults = FaultPlan(str(workdir / "faults"), FAULTS)
    table = str(workdir / "sums")
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED, rate=4_000,
                             faults=faults, interval_ms=150, sink=DeltaSink(table))
    result = p.run()
    assert result.status == "FINISHED" and len(faults.fired()) == len(FAULTS)
    assert result.restarts == len(faults.attempts_hit())
    dt = DeltaTable(table)
    check_exactly_once_rows(dt.to_pyarrow_table().to_pylist(), expected_running_sums(N, KEYS, SEED))
    # one commit per subtask and checkpoint, each with its application transaction
    history = [h for h in dt.history() if h.get("operation") == "WRITE"]
    assert history and all(h.get("ckpt.operator_uid") == "out" for h in history)
    assert not list((workdir / "sums" / "_ckpt_staging").iterdir()), "nothing left staged"


@pytest.mark.timeout(300)
def test_a_restored_savepoint_does_not_append_its_committed_epochs_again(workdir):
    """v1 stops with a savepoint (its last epoch is committed on the savepoint's
    notification); v2 restores it, and its recovery finds those transactions already in
    the table (Delta's txn version) and skips them."""
    table = str(workdir / "t")
    bg = Background(running_sum_pipeline(str(workdir / "a"), num_records=N, num_keys=KEYS,
                                         seed=SEED, rate=3_000, interval_ms=200,
                                         sink=DeltaSink(table)))
    job = bg.wait_running(min_checkpoints=2)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    p = running_sum_pipeline(str(workdir / "b"), num_records=N, num_keys=KEYS, seed=SEED,
                             interval_ms=200, sink=DeltaSink(table))
    assert p.run(restore=req.result["location"], trust_snapshot=True).status == "FINISHED"
    check_exactly_once_rows(DeltaTable(table).to_pyarrow_table().to_pylist(),
                            expected_running_sums(N, KEYS, SEED))


@pytest.mark.timeout(120)
def test_records_that_do_not_fit_the_table_fail_naming_the_column(workdir):
    import deltalake
    import pyarrow as pa

    table = str(workdir / "narrow")
    deltalake.write_deltalake(table, pa.table({"id": pa.array([1], pa.int64())}))
    p = running_sum_pipeline(str(workdir), num_records=200, num_keys=4, interval_ms=None,
                             sink=DeltaSink(table), restart=RestartStrategy.none())
    with pytest.raises(JobFailedError, match="column 'key' is not in the table"):
        p.run()
    assert DeltaTable(table).to_pyarrow_table().num_rows == 1, "nothing was appended"


def test_crafted_restored_transactions_are_refused():
    sink = DeltaSink("/tmp/t")
    good = {"staging": "out-job1-a0-s0-c7-0123abcd.parquet", "app_id": "ckpt-job1-out-0",
            "version": 7}
    sink.check_restored_transactions([good], location="chk-7")
    for bad, named in (({**good, "staging": "../../etc/passwd"}, "staging"),
                       ({**good, "staging": "x.jsonl"}, "staged Parquet file"),
                       ({**good, "app_id": "evil"}, "app_id"),
                       ({**good, "version": -1}, "version")):
        with pytest.raises(CorruptCheckpointError, match=named):
            sink.check_restored_transactions([bad], location="chk-7")


@pytest.mark.timeout(240)
def test_exactly_once_into_a_table_on_s3(workdir, s3_server, s3_bucket):
    """Table and staged epochs on the S3 test server (delta-rs's object store; the staging
    directory through the engine's S3 storage)."""
    options = {"AWS_ENDPOINT_URL": s3_server.endpoint_url, "AWS_ALLOW_HTTP": "true",
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    uri = f"s3://{s3_bucket}/sums"
    faults = FaultPlan(str(workdir / "faults"), [("kill", 2_500), ("notify", 3)])
    p = running_sum_pipeline(str(workdir), num_records=6_000, num_keys=KEYS, seed=SEED,
                             rate=4_000, faults=faults, interval_ms=200,
                             sink=DeltaSink(uri, storage_options=options))
    assert p.run().status == "FINISHED" and len(faults.fired()) == 2
    rows = DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
    check_exactly_once_rows(rows, expected_running_sums(6_000, KEYS, SEED))
