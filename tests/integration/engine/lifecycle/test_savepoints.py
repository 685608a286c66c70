"""Savepoints: stop-with-savepoint, restore at other parallelism, upgrades, relocation."""

import os
import shutil

import pytest
from click.testing import CliRunner
from pipelines import (
    Background,
    FaultPlan,
    check_exactly_once,
    expected_running_sums,
    running_sum_pipeline,
    versioned_pipeline,
)

from airflow_checkpoint_provider.engine import CorruptCheckpointError, JobFailedError, RestoreError
from airflow_checkpoint_provider.engine.cli import main as ckpt
from airflow_checkpoint_provider.engine.lifecycle.savepoints import (
    DisposeRefused,
    apply_savepoint_retention,
    dispose_savepoint,
    list_savepoints,
)
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot

N = 20_000
# 10 s of input: a job asked to stop, save or cancel must still be running when the request
# is claimed on a loaded machine (at 5,000/s a CI run's job ended first)
RATE = 2_000
pytestmark = pytest.mark.slow


# Most tests restore the savepoint in another root, with its own metadata DB: a relocated
# savepoint, restored with the trust flag (its signature is checked in test_snapshot_signing).


def stop_with_savepoint(root, version="v1", *, drain=False, **kwargs):
    bg = Background(versioned_pipeline(str(root), version, num_records=N, rate=RATE, **kwargs))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": drain})
    assert req.status == "SUCCEEDED", req.error
    result = bg.result()
    assert result.status == "STOPPED"
    assert bg.store.get_job(job.job_id).status == "STOPPED"
    return req.result["location"], bg.store


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """v1 at parallelism 2, stopped with a savepoint mid-stream."""
    root = tmp_path_factory.mktemp("stopped")
    location, store = stop_with_savepoint(root)
    return root, location, store


@pytest.mark.timeout(300)
@pytest.mark.parametrize("parallelism", [1, 3, 4])
def test_restore_at_other_parallelism_continues_exactly_once(stopped, tmp_path, parallelism):
    root, savepoint, _ = stopped
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    p = versioned_pipeline(str(tmp_path), "v1", num_records=N, out=str(out),
                           source_parallelism=min(parallelism, 3), keyed_parallelism=parallelism)
    result = p.run(restore=savepoint, trust_snapshot=True)
    assert result.status == "FINISHED" and result.restored_from == savepoint
    check_exactly_once(str(out), expected_running_sums(N, 50, 7))
    assert os.path.exists(os.path.join(savepoint, "_metadata")), "NO_CLAIM keeps the savepoint"


def test_savepoint_is_self_contained_and_recorded(stopped):
    root, savepoint, store = stopped
    snap = load_snapshot(savepoint)
    assert snap.doc["kind"] == "SAVEPOINT"
    assert os.path.basename(savepoint) == f"savepoint-{snap.doc['job_id']}-{snap.checkpoint_id}"
    for op in snap.operators.values():
        for sub in op["subtasks"]:
            if sub.get("keyed"):
                assert not os.path.isabs(sub["keyed"]["path"])
                assert os.path.exists(os.path.join(savepoint, sub["keyed"]["path"]))
    rows = list_savepoints(store, job_name="versioned")
    assert [r.location for r in rows] == [savepoint]
    # deleting every checkpoint of the job leaves the savepoint restorable
    shutil.rmtree(root / "ckpt")
    assert load_snapshot(savepoint).checkpoint_id == rows[0].checkpoint_id


@pytest.mark.timeout(300)
def test_upgrade_with_dropped_operator_needs_allow_non_restored_state(stopped, tmp_path):
    root, savepoint, _ = stopped
    v2 = versioned_pipeline(str(tmp_path), "v2", num_records=N, out=str(tmp_path / "out"))
    with pytest.raises(RestoreError, match=r"operator\(s\) 'audit'.*allow_non_restored_state"):
        v2.run(restore=savepoint, trust_snapshot=True)
    shutil.copytree(root / "out", tmp_path / "out", dirs_exist_ok=True)
    result = v2.run(restore=savepoint, allow_non_restored_state=True, trust_snapshot=True)
    assert result.status == "FINISHED"
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))


@pytest.mark.timeout(300)
def test_changed_state_kind_fails_naming_operator_and_state(stopped, tmp_path):
    _, savepoint, _ = stopped
    bad = versioned_pipeline(str(tmp_path), "v2-bad", num_records=N)
    with pytest.raises(JobFailedError, match="operator 'sum': state 'sum' was snapshotted as value"):
        bad.run(restore=savepoint, allow_non_restored_state=True, trust_snapshot=True)


@pytest.mark.timeout(300)
def test_moved_savepoint_restores_and_flipped_byte_is_rejected(stopped, tmp_path):
    root, savepoint, _ = stopped
    moved = tmp_path / "elsewhere" / "sp"
    shutil.copytree(savepoint, moved)
    shutil.copytree(root / "out", tmp_path / "out")
    p = versioned_pipeline(str(tmp_path), "v1", num_records=N)
    assert p.run(restore=str(moved), trust_snapshot=True).status == "FINISHED"
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))

    broken = tmp_path / "broken"
    shutil.copytree(savepoint, broken)
    name = next(n for n in sorted(os.listdir(broken)) if n.endswith(".state"))
    with open(broken / name, "r+b") as f:
        data = bytearray(f.read())
        data[3] ^= 0x01
        f.seek(0)
        f.write(bytes(data))
    # verified before the job is created: an explicit restore path fails loudly
    with pytest.raises(CorruptCheckpointError, match=f"state file .*{name} does not match its checksum"):
        versioned_pipeline(str(tmp_path / "b"), "v1", num_records=N).run(restore=str(broken),
                                                                    trust_snapshot=True)


@pytest.mark.timeout(300)
def test_savepoint_on_running_job_then_failed_savepoint_keeps_job_running(tmp_path):
    bg = Background(versioned_pipeline(str(tmp_path), "v1", num_records=N, rate=RATE))
    job = bg.wait_running()
    ok = bg.request(job.job_id, "SAVEPOINT", {"directory": str(tmp_path / "sps")})
    assert ok.status == "SUCCEEDED" and ok.result["location"].startswith(str(tmp_path / "sps"))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    bad = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"directory": str(blocker)})
    assert bad.status == "FAILED" and "not-a-dir" in bad.error
    assert bg.store.get_job(job.job_id).status == "RUNNING"
    result = bg.result(180)
    assert result.status == "FINISHED"          # sources resumed and read to the end
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(N, 50, 7))
    rows = bg.store.list_checkpoints(job.job_id, kind="SAVEPOINT")
    assert [r.status for r in rows] == ["COMPLETED", "FAILED"]
    assert all(r.status != "SUBSUMED" for r in rows), "savepoints are never subsumed"


@pytest.mark.timeout(300)
def test_savepoint_request_outside_the_allowed_roots_is_refused(tmp_path, tmp_path_factory):
    bg = Background(versioned_pipeline(str(tmp_path), "v1", num_records=N, rate=RATE))
    job = bg.wait_running()
    outside = tmp_path_factory.mktemp("outside")
    for bad in (str(outside), str(tmp_path / ".." / outside.name)):
        req = bg.request(job.job_id, "SAVEPOINT", {"directory": bad})
        assert req.status == "FAILED" and ("outside the allowed roots" in req.error or "'..'" in req.error)
    assert os.listdir(outside) == []
    bg.request(job.job_id, "CANCEL")
    assert bg.result().status == "CANCELED"


@pytest.mark.timeout(300)
def test_dispose_and_retention(tmp_path):
    bg = Background(versioned_pipeline(str(tmp_path), "v1", num_records=N, rate=RATE))
    job = bg.wait_running()
    locations = [bg.request(job.job_id, "SAVEPOINT").result["location"] for _ in range(3)]
    with pytest.raises(DisposeRefused, match="not a savepoint"):
        dispose_savepoint(bg.store.latest_completed_checkpoint(job_id=job.job_id).location, bg.store)
    bg.request(job.job_id, "CANCEL")
    bg.result()
    disposed = apply_savepoint_retention(bg.store, job_name="versioned", max_count=1).disposed
    assert disposed == locations[:2]
    assert not os.path.exists(locations[0]) and os.path.exists(locations[2])
    assert [r.location for r in list_savepoints(bg.store, job_name="versioned")] == locations[2:]
    # max age 0 disposes everything but the newest
    assert apply_savepoint_retention(bg.store, job_name="versioned", max_age_seconds=0).disposed == []
    db = bg.pipeline.metadata_url
    res = CliRunner().invoke(ckpt, ["dispose", locations[2], "--db", db])
    assert res.exit_code == 0 and not os.path.exists(locations[2])
    assert bg.store.list_checkpoints(job.job_id, kind="SAVEPOINT", status="DISCARDED")


@pytest.mark.timeout(300)
def test_claim_mode_lets_the_new_job_delete_the_restored_savepoint(tmp_path):
    location, _ = stop_with_savepoint(tmp_path / "a")
    shutil.copytree(tmp_path / "a" / "out", tmp_path / "b" / "out")
    # rate-limited so the rest of the input spans many 50 ms checkpoints even on a busy machine
    p = versioned_pipeline(str(tmp_path / "b"), "v1", num_records=N, interval_ms=50, rate=16_000)
    result = p.run(restore=location, claim_mode="CLAIM", trust_snapshot=True)
    assert result.checkpoints_completed >= 3
    assert not os.path.exists(location), "a claimed snapshot is subsumed like the job's own"


def test_corrupt_metadata_of_savepoint(stopped, tmp_path):
    _, savepoint, _ = stopped
    copy = tmp_path / "sp"
    shutil.copytree(savepoint, copy)
    with open(copy / "_metadata", "ab") as f:
        f.write(b" ")
    with open(copy / "_metadata", "r+b") as f:
        data = f.read().replace(b'"kind": "SAVEPOINT"', b'"kind": "CHECKPOINT"')
        f.seek(0)
        f.write(data)
    with pytest.raises(CorruptCheckpointError, match="fails its checksum"):
        load_snapshot(str(copy))


@pytest.mark.timeout(300)
def test_failure_after_the_stop_savepoint_completed_ends_the_job_stopped(tmp_path):
    """A task fails while the job winds down after its stop savepoint completed (here: in the
    savepoint's notification, before the sink committed it). The job must end STOPPED, not
    restart and go on writing after the savepoint; the savepoint's pending commit is made
    by the job that restores it."""
    faults = FaultPlan(str(tmp_path / "faults"), [("notify", 1)])
    # no periodic checkpoints: the first checkpoint (id >= 1) is the stop savepoint
    bg = Background(running_sum_pipeline(str(tmp_path / "a"), rate=RATE, interval_ms=None,
                                         faults=faults, out=str(tmp_path / "out")))
    job = bg.wait_running(min_checkpoints=0)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    result = bg.result(60)
    assert result.status == "STOPPED" and result.restarts == 0
    assert [k for k in faults.fired()] == ["notify-1"], "the failure happened after the savepoint"
    restored = running_sum_pipeline(str(tmp_path / "b"), out=str(tmp_path / "out"))
    assert restored.run(restore=req.result["location"], trust_snapshot=True).status == "FINISHED"
    check_exactly_once(str(tmp_path / "out"), expected_running_sums(20_000, 50, 7))
