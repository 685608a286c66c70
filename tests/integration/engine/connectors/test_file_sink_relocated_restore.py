"""A savepoint or checkpoint restored by a new job version whose FileSink writes to another
directory (issue 51, item 4).

The old job wrote to directory A; the new version writes to B. A transaction the snapshot
holds was staged in A: it is committed there (as Flink commits a restored pending
transaction where it was staged), or recognised as committed there already (a stop
savepoint commits everything), never reported as lost. Where that is impossible (A is gone)
the restore is refused before the job starts, naming where the records are and what to do.

Every test runs real jobs (local runner, slot processes) and compares the union of A and B
with the failure-free reference: every input record exactly once, the running state
continued (counts 1..n per key), A holding the old job's output up to the snapshot, B the
new job's after it."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from checkpoint_damage import CorruptLatest, corrupted
from pipelines import (
    Background,
    FaultPlan,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    FileSink,
    JobFailedError,
    RestartStrategy,
    read_committed,
)
from airflow_checkpoint_provider.engine.connectors.base import SourceContext
from airflow_checkpoint_provider.engine.connectors.files.sink import FileSinkRestoreError
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata, load_snapshot

pytestmark = pytest.mark.slow
N, KEYS, SEED = 6_000, 50, 7
RATE = 2_000  # 3 s of input: the job is still running when it is asked to stop


def _job(root, out, **kwargs):
    return running_sum_pipeline(str(root), num_records=N, num_keys=KEYS, seed=SEED,
                                sink=FileSink(str(out)), **kwargs)


def _stop_with_savepoint(root, out, **kwargs) -> tuple[str, str]:
    """Job 1 writing to ``out``, stopped with a savepoint: (savepoint location, job id)."""
    bg = Background(_job(root, out, rate=RATE, **kwargs))
    job = bg.wait_running(min_checkpoints=0)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result(120).status == "STOPPED"
    return req.result["location"], job.job_id


def _parts(directory) -> list[tuple[str, int]]:
    """(job id, checkpoint id) of each committed part file under ``directory``."""
    out = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        m = re.fullmatch(r"part-out~(.+)~c(\d+)~s\d+\.jsonl", name)
        if m:
            out.append((m[1], int(m[2])))
    return out


def _staged(directory) -> list[str]:
    staging = os.path.join(directory, "_staging")
    return sorted(os.listdir(staging)) if os.path.isdir(staging) else []


def _check_split(a, b, *, old_job: str, new_job: str, snapshot_id: int) -> None:
    """A: the old job's output up to the snapshot, B: the new job's; together exactly once."""
    assert {j for j, _ in _parts(a)} == {old_job}
    assert max(c for _, c in _parts(a)) <= snapshot_id
    assert _parts(b) and {j for j, _ in _parts(b)} == {new_job}
    check_exactly_once_rows([*read_committed(str(a)), *read_committed(str(b))],
                            expected_running_sums(N, KEYS, SEED))


def _restore_into(root, b, location, **kwargs):
    result = _job(root, b, **kwargs).run(restore=location)
    assert result.status == "FINISHED" and result.restarts == 0, result
    return result


@pytest.mark.timeout(240)
def test_stop_savepoint_restored_with_the_sink_in_a_new_directory(workdir):
    """Stop-with-savepoint committed everything in A: nothing is left to do, no error."""
    a, b = workdir / "a", workdir / "b"
    location, old = _stop_with_savepoint(workdir, a)
    result = _restore_into(workdir, b, location)
    _check_split(a, b, old_job=old, new_job=result.job_id,
                 snapshot_id=load_snapshot(location).checkpoint_id)


@pytest.mark.timeout(240)
def test_pending_savepoint_commit_is_made_where_it_was_staged(workdir):
    """The stop savepoint completed but a task failed before its sink committed it: the
    savepoint's transaction is still staged in A. The new job (sink in B) commits it in A."""
    a, b = workdir / "a", workdir / "b"
    faults = FaultPlan(str(workdir / "faults"), [("notify", 1)])
    location, old = _stop_with_savepoint(workdir, a, interval_ms=None, faults=faults)
    assert list(faults.fired()) == ["notify-1"]
    sp = load_snapshot(location).checkpoint_id
    pending = [n for n in _staged(a) if f"~c{sp}~" in n]
    assert pending, "the savepoint's commit is pending in A"
    result = _restore_into(workdir, b, location)
    assert not set(pending) & set(_staged(a)), "committed in A"
    assert (old, sp) in _parts(a)
    _check_split(a, b, old_job=old, new_job=result.job_id, snapshot_id=sp)


@pytest.mark.timeout(240)
def test_failed_jobs_pending_commit_is_made_where_it_was_staged(workdir):
    """Job 1 fails for good after checkpoint 2 completed, before one sink subtask committed
    it (a pre-committed transaction is pending in the checkpoint; the killed attempt's open
    epoch is left staged too). The new version restores that checkpoint into B."""
    a, b = workdir / "a", workdir / "b"
    faults = FaultPlan(str(workdir / "faults"), [("notify", 2)])
    with pytest.raises(JobFailedError, match="injected failure notify 2") as info:
        _job(workdir, a, rate=RATE, interval_ms=150, faults=faults,
             restart=RestartStrategy.none()).run()
    first = info.value.result
    location = first.latest_checkpoint
    chk = load_snapshot(location).checkpoint_id
    pending = [n for n in _staged(a) if f"~c{chk}~" in n]
    assert pending, "a transaction of the restored checkpoint is pending in A"
    result = _restore_into(workdir, b, location)
    assert not set(pending) & set(_staged(a)), "committed in A"
    assert not [n for n in _staged(a) if first.job_id in n], \
        "the ended job's leftovers in A (if any) are removed (their records are replayed into B)"
    _check_split(a, b, old_job=first.job_id, new_job=result.job_id, snapshot_id=chk)


@pytest.mark.timeout(300)
def test_restore_is_refused_up_front_while_the_staging_directory_is_gone(workdir):
    """A, holding the savepoint's pending transaction, was moved away: the restore is refused
    before the job starts, naming A and the staged file, not "lost"; nothing is written to
    B. With A back in place the same restore commits it there."""
    a, b, moved = workdir / "a", workdir / "b", workdir / "a-moved"
    faults = FaultPlan(str(workdir / "faults"), [("notify", 1)])
    location, old = _stop_with_savepoint(workdir, a, interval_ms=None, faults=faults)
    sp = load_snapshot(location).checkpoint_id
    assert [n for n in _staged(a) if f"~c{sp}~" in n], "the savepoint's commit is pending in A"
    os.rename(a, moved)
    with pytest.raises(FileSinkRestoreError) as info:
        _job(workdir, b).run(restore=location)
    message = str(info.value)
    assert str(a) in message and str(b) in message and location in message
    assert re.search(rf"transaction out~{old}~a0~s\d+~c{sp}~[0-9a-f]+\.inprogress", message)
    assert "does not exist" in message and "lost" not in message
    assert _parts(b) == []
    os.rename(moved, a)
    result = _restore_into(workdir, b, location)
    _check_split(a, b, old_job=old, new_job=result.job_id, snapshot_id=sp)


@pytest.mark.timeout(240)
def test_latest_falling_back_past_a_corrupt_checkpoint_removes_its_output_in_the_old_directory(
        workdir):
    """Job 1 (sink in A) fails after its newest checkpoint was damaged; the new version (sink
    in B) restores "latest": it falls back to the older checkpoint, so job 1's output
    committed after it -- in A -- is removed as it would be in the sink's own directory (its
    records are replayed into B), and the union is exactly once."""
    a, b = workdir / "a", workdir / "b"
    first = _job(workdir, a, rate=RATE, interval_ms=100, restart=RestartStrategy.none())
    keyed = next(n for v in first.execution_graph().vertices for n in v.nodes if n.uid == "sum")
    keyed.payload = CorruptLatest(str(workdir), "flip_state_byte", at_id=N // 2)
    with pytest.raises(JobFailedError):
        first.run()
    chk_dir, _ = corrupted(workdir)
    bad = int(os.path.basename(chk_dir)[4:])
    old = os.path.basename(os.path.dirname(chk_dir))
    assert (old, bad) in _parts(a) or any(c >= bad for j, c in _parts(a)), \
        "the damaged checkpoint's output was committed in A"
    result = _job(workdir, b).run(restore="latest")
    assert result.status == "FINISHED" and result.restored_from != chk_dir
    restored = load_snapshot(result.restored_from).checkpoint_id
    assert restored < bad
    _check_split(a, b, old_job=old, new_job=result.job_id, snapshot_id=restored)


@pytest.mark.timeout(300)
def test_old_output_archived_on_purpose_needs_allow_missing_restored(workdir):
    """After the stop savepoint the old job's directory A was archived elsewhere (moved away
    for good). Restoring into B is refused up front, offering allow_missing_restored; with
    it the job restores: its transactions are skipped with a warning, and the archive and B
    together hold every record exactly once (the savepoint had committed everything)."""
    a, b, archive = workdir / "a", workdir / "b", workdir / "archive"
    location, old = _stop_with_savepoint(workdir, a)
    os.rename(a, archive)
    with pytest.raises(FileSinkRestoreError, match="allow_missing_restored=True"):
        _job(workdir, b).run(restore=location)
    assert _parts(b) == []
    result = running_sum_pipeline(
        str(workdir), num_records=N, num_keys=KEYS, seed=SEED,
        sink=FileSink(str(b), allow_missing_restored=True)).run(restore=location)
    assert result.status == "FINISHED" and result.restarts == 0
    assert not a.exists(), "nothing is created where the old output was"
    _check_split(archive, b, old_job=old, new_job=result.job_id,
                 snapshot_id=load_snapshot(location).checkpoint_id)


def _forget_directories(location: str) -> None:
    """The savepoint as a FileSink that did not record its directory wrote it (before issue
    51); re-encoded without a signature (restored with the trust flag)."""
    snap = load_snapshot(location)
    doc = dict(snap.doc)
    for sub in doc["operators"]["out"]["subtasks"]:
        for entry in sub["operator_state"]:
            for txn in entry["transactions"]:
                txn.pop("directory", None)
    with open(os.path.join(snap.directory, "_metadata"), "wb") as f:
        f.write(encode_metadata(doc))


@pytest.mark.timeout(300)
def test_older_snapshot_without_a_recorded_directory_is_refused_saying_where_to_look(workdir):
    """A snapshot whose transactions do not name their directory, restored into B where they
    are not: the sink subtask that recovers them fails the job at once (no restarts), naming
    B, the staged file and how to commit it (restore with the old directory), not "lost".
    Restored with the old directory, it continues exactly once."""
    a, b = workdir / "a", workdir / "b"
    faults = FaultPlan(str(workdir / "faults"), [("notify", 1)])
    location, old = _stop_with_savepoint(workdir, a, interval_ms=None, faults=faults)
    sp = load_snapshot(location).checkpoint_id
    pending = [n for n in _staged(a) if f"~c{sp}~" in n]
    assert pending, "the savepoint's commit is pending in A"
    _forget_directories(location)
    with pytest.raises(JobFailedError, match="FileSinkRestoreError") as info:
        _job(workdir, b).run(restore=location, trust_snapshot=True)
    assert info.value.result.restarts == 0, "fails at once: restarting cannot help"
    message = str(info.value)
    assert str(b) in message
    assert re.search(rf"transaction out~{old}~a0~s\d+~c{sp}~[0-9a-f]+\.inprogress "
                     rf"\(checkpoint {sp} of job {old}\)", message)
    assert "FileSink(directory=" in message and "lost" not in message
    assert _parts(b) == []
    shutil.rmtree(b, ignore_errors=True)
    result = _job(workdir, a).run(restore=location, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restarts == 0
    assert not set(pending) & set(_staged(a)), "committed in A"
    check_exactly_once_rows(read_committed(str(a)), expected_running_sums(N, KEYS, SEED))


def _writer(directory, job_id: str, subtask: int = 0, **kwargs):
    ctx = SourceContext(job_id=job_id, job_name="j", operator_uid="out", subtask_index=subtask,
                        parallelism=1, attempt=0)
    sink = FileSink(str(directory), **kwargs)
    return sink, sink.create_writer(ctx)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("partition_by", [None, ["p"]])
def test_writer_commits_a_restored_transaction_in_its_directory_and_cleans_up_there(
        tmp_path, partition_by):
    """The writers alone: job "old" (sink in A) pre-commits checkpoint 1 and leaves an open
    epoch staged; job "new" (sink in B) recovers checkpoint 1's transactions: they are
    committed in A (partition directories included), recovering again is a no-op, and once
    "old" has ended its leftovers in A are removed. Nothing appears in B."""
    a, b = tmp_path / "a", tmp_path / "b"
    _, old = _writer(a, "old", partition_by=partition_by)
    old.write([{"id": 1, "p": "x"}, {"id": 2, "p": "y"}])
    txns = old.pre_commit(1)
    assert {t["directory"] for t in txns} == {str(a)}
    old.write([{"id": 3, "p": "x"}])  # the open epoch: never committed
    old.close()
    sink, new = _writer(b, "new", partition_by=partition_by)
    sink.check_restored_transactions(txns, location="chk-1")
    new.recover(txns)
    new.recover(txns)  # a failover of the new job: committed already, nothing to do
    assert sorted(r["id"] for r in read_committed(str(a))) == [1, 2]
    assert list(read_committed(str(b))) == []
    assert len(_staged(a)) == 1, "the open epoch stays staged until the old job has ended"
    assert len(sink.discard_staged_of_job("out", "old")) == 1
    assert _staged(a) == [] and sorted(r["id"] for r in read_committed(str(a))) == [1, 2]


@pytest.mark.timeout(60)
def test_writer_refuses_to_commit_into_a_recorded_staging_directory_that_is_a_symlink(tmp_path):
    """A recorded directory that is not the sink's is only written when its _staging is this
    user's real directory: a symbolic link there is refused, naming the path."""
    a, elsewhere, b = tmp_path / "a", tmp_path / "elsewhere", tmp_path / "b"
    _, old = _writer(a, "old")
    old.write([{"id": 1}])
    txns = old.pre_commit(1)
    os.rename(a / "_staging", elsewhere)
    os.symlink(elsewhere, a / "_staging")
    _, new = _writer(b, "new")
    with pytest.raises(FileSinkRestoreError, match=re.escape(str(a / "_staging"))):
        new.recover(txns)
    assert _parts(a) == [] and len(os.listdir(elsewhere)) == 1
