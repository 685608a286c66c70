"""Restore fallback: a corrupt or incomplete latest checkpoint is marked CORRUPT and the next
older retained one is restored (``restore="latest"`` and in-job failover), with output equal
to a failure-free run's; explicit restore paths fail loudly; in-use snapshots are protected."""

import json
import logging
import os
import shutil

import pytest
from checkpoint_damage import CorruptLatest, corrupted
from pipelines import (
    Background,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import (
    CorruptCheckpointError,
    JobFailedError,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.fs.storage import sha256
from airflow_checkpoint_provider.engine.lifecycle.savepoints import (
    DisposeRefused,
    dispose_savepoint,
)
from airflow_checkpoint_provider.engine.snapshot.codec import _canonical, encode_metadata

N, KEYS, SEED = 8000, 50, 7
KINDS = ["flip_state_byte", "truncate_metadata", "delete_state_file", "delete_chk_dir"]


def corrupting_pipeline(root, kind, restart):
    p = running_sum_pipeline(str(root), num_records=N, num_keys=KEYS, seed=SEED, rate=4000,
                             interval_ms=100, restart=restart)
    keyed = next(n for v in p.execution_graph().vertices for n in v.nodes if n.uid == "sum")
    keyed.payload = CorruptLatest(str(root), kind, at_id=3000)
    return p


@pytest.fixture(scope="module")
def expected():
    return expected_running_sums(N, KEYS, SEED)


def _check_marked_corrupt(root, chk_dir, bad, caplog):
    store = MetadataStore("sqlite:///" + os.path.join(root, "meta.db"))
    try:
        rows = [r for j in store.list_jobs() for r in store.list_checkpoints(j.job_id)
                if r.location == chk_dir]
        assert [r.status for r in rows] == ["CORRUPT"]
        assert bad in rows[0].failure_reason or "does not exist" in rows[0].failure_reason
    finally:
        store.close()
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "marked CORRUPT" in r.getMessage()]
    assert warnings and bad in warnings[0], warnings


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", KINDS)
def test_failover_falls_back_past_a_corrupt_latest_checkpoint(workdir, expected, kind, caplog):
    caplog.set_level(logging.WARNING)
    p = corrupting_pipeline(workdir, kind, RestartStrategy.fixed_delay(attempts=3, delay_ms=0))
    result = p.run()
    assert result.status == "FINISHED" and result.restarts == 1
    chk_dir, bad = corrupted(workdir)
    check_exactly_once(str(workdir / "out"), expected)
    _check_marked_corrupt(workdir, chk_dir, bad, caplog)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", KINDS)
def test_restore_latest_falls_back_past_a_corrupt_latest_checkpoint(workdir, expected, kind, caplog):
    caplog.set_level(logging.WARNING)
    with pytest.raises(JobFailedError):
        corrupting_pipeline(workdir, kind, RestartStrategy.none()).run()
    chk_dir, bad = corrupted(workdir)
    if kind == "flip_state_byte":
        # an explicit restore path is never skipped: it fails loudly naming the file
        explicit = running_sum_pipeline(str(workdir / "explicit"), num_records=N)
        with pytest.raises(CorruptCheckpointError, match=f"{bad} does not match its checksum"):
            explicit.run(restore=chk_dir, trust_snapshot=True)  # another metadata DB
    p = running_sum_pipeline(str(workdir), num_records=N, num_keys=KEYS, seed=SEED)
    result = p.run(restore="latest")
    assert result.status == "FINISHED" and result.restored_from != chk_dir
    check_exactly_once(str(workdir / "out"), expected)
    _check_marked_corrupt(workdir, chk_dir, bad, caplog)


@pytest.mark.timeout(120)
def test_savepoint_into_a_retained_checkpoint_directory_is_refused(workdir):
    p = running_sum_pipeline(str(workdir), num_records=200_000, rate=4000)
    bg = Background(p)
    job = bg.wait_running(min_checkpoints=1)
    chk = bg.store.latest_completed_checkpoint(job_id=job.job_id).location
    for bad in (chk, os.path.join(chk, "sp"), os.path.dirname(chk), str(workdir / "ckpt" / "x")):
        req = bg.request(job.job_id, "SAVEPOINT", {"directory": bad})
        assert req.status == "FAILED" and "inside the checkpoint directory" in req.error, req.error
    ok = bg.request(job.job_id, "SAVEPOINT", {"directory": str(workdir / "ckpt" / "savepoints")})
    assert ok.status == "SUCCEEDED", ok.error
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"


def _savepoint(directory) -> str:
    os.makedirs(directory)
    doc = {"job_id": "a" * 32, "job_name": "j", "checkpoint_id": 3, "kind": "SAVEPOINT",
           "timestamp_ms": 1, "operators": {}}
    with open(os.path.join(directory, "_metadata"), "wb") as f:
        f.write(encode_metadata(doc))
    return str(directory)


def test_dispose_refuses_another_spelling_of_an_in_use_savepoint(tmp_path):
    sp = _savepoint(tmp_path / "sps" / "savepoint-aaaaaa-3")
    os.symlink(tmp_path / "sps", tmp_path / "link")
    store = MetadataStore("sqlite:///" + str(tmp_path / "meta.db"))
    try:
        store.create_job(job_id="b" * 32, job_name="j", parallelism=1, restored_from=sp)
        spellings = [sp + "/", sp + "//", f"file://{sp}", os.path.join(sp, "_metadata"),
                     str(tmp_path / "link" / "savepoint-aaaaaa-3"),
                     str(tmp_path / "sps" / "." / ".." / "sps" / "savepoint-aaaaaa-3")]
        for spelling in spellings:
            with pytest.raises(DisposeRefused, match="still used by running job"):
                dispose_savepoint(spelling, store)
        assert os.path.exists(os.path.join(sp, "_metadata"))
    finally:
        store.close()


@pytest.mark.timeout(120)
def test_crafted_sink_transaction_in_a_snapshot_is_refused_before_any_file_moves(workdir):
    result = running_sum_pipeline(str(workdir / "a"), num_records=2000).run()
    crafted = workdir / "crafted"
    shutil.copytree(result.latest_checkpoint, crafted)
    with open(crafted / "_metadata") as f:
        doc = json.load(f)
    doc["operators"]["out"]["subtasks"][0]["operator_state"] = [{"checkpoint_id": 1, "transactions": [
        {"staging": "../../../payload.inprogress", "final": "../../site-packages/evil.pth"}]}]
    doc["checksum"] = sha256(_canonical({k: v for k, v in doc.items() if k != "checksum"}))
    with open(crafted / "_metadata", "w") as f:
        json.dump(doc, f)
    (workdir / "site-packages").mkdir()
    (workdir / "payload.inprogress").write_text("import os; os.system('echo pwned')\n")
    p = running_sum_pipeline(str(workdir / "b"), num_records=2000)
    # unsigned (refused: test_snapshot_signing.py); with the trust flag the sink still refuses
    with pytest.raises(CorruptCheckpointError, match=r"'out'.*transactions\[0\]\.staging"):
        p.run(restore=str(crafted), trust_snapshot=True)
    assert os.listdir(workdir / "site-packages") == []
    assert (workdir / "payload.inprogress").exists()
