"""ckpt verify-restore refuses exactly what the real restore refuses (issue 54 item 4): each
case runs the pre-flight check and then the restore itself, and both must refuse (or both
accept) for the same operator, with the same reason where the runtime gives one."""

from __future__ import annotations

import os

import pytest
from pipelines import Background, RunningSum

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.lifecycle.verify import verify_restore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def keyed_pipeline(root: str, *, int_keys: bool = False, aggregations: dict | None = None,
                   with_audit: bool = True, out: str = "out", num_records: int | None = 20_000,
                   rate: float | None = None, int_keys_after_sum: bool = False,
                   meta: str = "meta.db") -> Pipeline:
    """gen -> key_by(key) -> sum (per-key state) -> key_by(key) -> totals (aggregate())
    [-> audit] -> file sink. ``int_keys``: the generator's keys become ints (a v2 whose
    key_by returns another type); ``int_keys_after_sum``: only the aggregate's key column
    becomes an int."""
    p = Pipeline("keytypes", checkpoint=CheckpointConfig(
        interval_ms=200, directory=os.path.join(root, "ckpt"),
        savepoint_directory=os.path.join(root, "savepoints"), allowed_savepoint_roots=(root,)),
        restart_strategy=RestartStrategy.none(),
        metadata_url="sqlite:///" + os.path.join(root, meta))
    stream = (p.source(GeneratorSource(num_records, num_keys=10, seed=3, splits=2,
                                       records_per_second=rate, int_keys=int_keys),
                       uid="gen", parallelism=1)
              .key_by("key").process(RunningSum(), uid="sum", parallelism=1))
    if int_keys_after_sum:
        stream = stream.map(lambda r: {**r, "key": int(r["key"][1:])})
    stream = stream.key_by("key").aggregate(uid="totals", parallelism=1,
                                            **(aggregations or {"n": "count"}))
    if with_audit:
        stream = (stream.map(lambda r: {**r, "id": 0, "value": r["n"]}).key_by("key")
                  .process(RunningSum(), uid="audit", parallelism=1))
    stream.sink(FileSink(os.path.join(root, out)), uid="out")
    return p


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("keytypes"))
    bg = Background(keyed_pipeline(root, num_records=None, rate=2000))
    job = bg.wait_running()
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    bg.result()
    return root, req.result["location"]


def restore(pipeline: Pipeline, location: str, **kwargs) -> tuple[str, str]:
    """The real restore: (job status, failure reason or the error raised)."""
    try:
        result = pipeline.run(restore=location, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a refused restore may raise before the job
        return "REFUSED", f"{type(exc).__name__}: {exc}"
    return result.status, result.failure_reason or ""


def test_the_unchanged_job_passes_both(savepoint):
    root, location = savepoint
    report = verify_restore(keyed_pipeline(root), location)
    assert report.ok, report.describe()
    assert report.keys_probed.get("sum") and report.keys_probed.get("totals"), report
    assert restore(keyed_pipeline(root), location)[0] == "FINISHED"


def test_a_key_type_change_is_refused_by_both_with_the_runtime_error(savepoint):
    root, location = savepoint
    report = verify_restore(keyed_pipeline(root, int_keys=True), location)
    assert not report.ok
    assert report.key_types == {"sum": "str", "totals": "str", "audit": "str"}
    uids = {p.uid for p in report.problems}
    assert "sum" in uids, report.describe()
    reason = next(p.reason for p in report.problems if p.uid == "sum")
    assert "is of type int, but the state restored from the snapshot has keys of type str" \
        in reason
    status, failure = restore(keyed_pipeline(root, int_keys=True), location)
    assert status in ("FAILED", "REFUSED"), failure
    assert "operator 'sum'" in failure and "is of type int" in failure, failure


def test_an_aggregate_key_column_type_change_is_refused_by_both(savepoint):
    """Only the aggregate changes its key type: a map before it turns the key into an int."""
    root, location = savepoint

    def v2() -> Pipeline:
        return keyed_pipeline(root, int_keys_after_sum=True)

    report = verify_restore(v2(), location, )
    assert not report.ok
    problem = next(p for p in report.problems if p.uid == "totals")
    assert "aggregate 'totals': key column 'key' changed type from string to int64" \
        in problem.reason, report.describe()
    status, failure = restore(v2(), location)
    assert status in ("FAILED", "REFUSED"), failure
    assert "aggregate 'totals': key column 'key' changed type from string to int64" in failure


def test_a_changed_aggregate_is_refused_by_both(savepoint):
    root, location = savepoint
    changed = {"n": "count", "total": ("sum", "value")}
    report = verify_restore(keyed_pipeline(root, aggregations=changed), location)
    assert not report.ok and report.problems[0].uid == "totals", report.describe()
    status, failure = restore(keyed_pipeline(root, aggregations=changed), location)
    assert status in ("FAILED", "REFUSED") and "totals" in failure, failure


def test_a_removed_uid_is_refused_by_both_unless_non_restored_state_is_allowed(savepoint):
    root, location = savepoint
    report = verify_restore(keyed_pipeline(root, with_audit=False), location)
    assert not report.ok and report.problems[0].uid == "audit", report.describe()
    status, failure = restore(keyed_pipeline(root, with_audit=False), location)
    assert status in ("FAILED", "REFUSED") and "audit" in failure, failure
    assert verify_restore(keyed_pipeline(root, with_audit=False), location,
                          allow_non_restored_state=True).ok
    assert restore(keyed_pipeline(root, with_audit=False), location,
                   allow_non_restored_state=True)[0] == "FINISHED"


def test_a_sink_whose_restored_transactions_are_gone_is_refused_by_both(savepoint):
    """The savepoint's sink transactions are in <root>/out; moved away, the file sink of the
    new job (another directory) cannot find them: both refuse, naming the sink."""
    root, location = savepoint
    os.rename(os.path.join(root, "out"), os.path.join(root, "out-moved"))
    try:
        report = verify_restore(keyed_pipeline(root, out="elsewhere"), location)
        assert not report.ok and report.problems[0].uid == "out", report.describe()
        status, failure = restore(keyed_pipeline(root, out="elsewhere"), location)
        assert status in ("FAILED", "REFUSED"), failure
        assert "FileSinkRestoreError" in failure or "file sink" in failure, failure
    finally:
        os.rename(os.path.join(root, "out-moved"), os.path.join(root, "out"))


def test_a_snapshot_not_signed_by_the_jobs_db_is_refused_by_both_unless_trusted(savepoint):
    """--db: the savepoint is signed with meta.db's key; a job of another metadata DB refuses
    it (UntrustedSnapshotError), and so does verify-restore given that DB."""
    from airflow_checkpoint_provider.engine.catalog import MetadataStore

    root, location = savepoint
    other = "sqlite:///" + os.path.join(root, "other.db")
    MetadataStore(other).close()  # created and migrated, as 'ckpt db upgrade' does
    assert verify_restore(keyed_pipeline(root), location,
                          metadata_url="sqlite:///" + os.path.join(root, "meta.db")).ok
    report = verify_restore(keyed_pipeline(root, meta="other.db"), location,
                            metadata_url=other)
    assert not report.ok and "is untrusted" in report.describe(), report.describe()
    status, failure = restore(keyed_pipeline(root, meta="other.db"), location)
    assert status in ("FAILED", "REFUSED") and "is untrusted" in failure, failure
    assert verify_restore(keyed_pipeline(root, meta="other.db"), location, metadata_url=other,
                          trust_snapshot=True).ok
