"""Issue 42, item 6: a path read back from the metadata DB is untrusted.

Someone who can write the metadata DB wrote a ``shared_state`` row with
``file_key='/abs/path'`` or ``'../../../../victim'`` (both files were deleted at the job's
next checkpoint) and a FAILED checkpoint row pointing at a foreign ``chk-99`` directory
(deleted by the next ``--restore latest``). Now only files inside the job's own directory are
ever deleted."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow_checkpoint_provider.engine import CheckpointConfig
from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint.coordinator import CheckpointCoordinator
from airflow_checkpoint_provider.engine.checkpoint.outcomes import TaskAck
from airflow_checkpoint_provider.engine.checkpoint.partial import discard_partial_checkpoints

TASKS = [(0, 0)]


def _ack(c, chk, shared, now):
    files = [
        {"name": os.path.basename(k), "size": 1, "sha256": "0" * 64, "shared": k} for k in shared
    ]
    keyed = {"type": "rocksdb", "files": files, "key_group_range": [0, 127]}
    return c.receive_ack(
        chk,
        (0, 0),
        TaskAck.from_wire({"op": {"keyed": keyed}},
                          {"state_size": 1, "checkpointed_size": 1}),
        now,
    )


def test_shared_state_rows_pointing_outside_the_job_dir_are_never_deleted(tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    job_dir = tmp_path / "ckpt" / "j" / "job1"
    (job_dir / "shared").mkdir(parents=True)
    store.create_job(job_id="job1", job_name="j", parallelism=1)
    store.set_job_status("job1", "RUNNING")
    absolute = tmp_path / "victim-abs"
    relative = tmp_path / "victim-rel"
    for victim in (absolute, relative):
        victim.write_text("precious")
    for name in ("a", "b"):
        (job_dir / "shared" / name).write_text("state")
    c = CheckpointCoordinator(
        job_id="job1",
        job_name="j",
        job_dir=str(job_dir),
        config=CheckpointConfig(interval_ms=100, initial_delay_ms=0, retained=1),
        tasks=TASKS,
        operator_info={"op": {"kind": "operator", "parallelism": 1, "max_parallelism": 128}},
        send_trigger=lambda *a: None,
        send_notify=lambda chk: None,
        send_abort=lambda chk: None,
        store=store,
        now=0.0,
    )
    c.set_tasks_running(set(TASKS))
    try:
        chk = c.maybe_trigger_periodic(0.0)
        assert _ack(c, chk, ["shared/a"], 0.01) is not None
        # the DB writer's rows: an absolute key and one climbing out of the job dir
        depth = len(job_dir.relative_to(tmp_path).parts)
        store.register_shared_state(
            "job1", chk, [str(absolute), "/".join([".."] * depth) + "/victim-rel"]
        )
        chk2 = c.maybe_trigger_periodic(1.0)
        assert _ack(c, chk2, ["shared/b"], 1.01) is not None  # subsumes chk: discards 'a'
    finally:
        c.cleaner.close()
        store.close()
    assert absolute.read_text() == "precious" and relative.read_text() == "precious"
    assert not (job_dir / "shared" / "a").exists()  # the job's own unreferenced file goes
    assert (job_dir / "shared" / "b").exists()


def _failed_row(store, job_id, job_name, chk, location):
    store.add_pending_checkpoint(
        job_id, chk, kind="CHECKPOINT", trigger_time=datetime.now(UTC), location=str(location)
    )
    store.fail_checkpoint(job_id, chk, reason="declined")


def test_a_failed_row_pointing_at_a_foreign_chk_directory_is_not_deleted(tmp_path):
    store = MetadataStore(f"sqlite:///{tmp_path}/meta.db")
    root = tmp_path / "ckpt"
    own = root / "j" / "dead" / "chk-2"
    foreign = tmp_path / "other-team" / "data" / "chk-99"  # not <root>/j/dead/
    sibling = tmp_path / "ckpt-evil" / "j" / "dead" / "chk-98"  # right shape, other root
    climbing = root / "j" / "dead" / ".." / ".." / ".." / "other-team" / "x" / "chk-97"
    link = root / "j" / "dead" / "chk-96"
    for d in (own, foreign, sibling, climbing):
        d.mkdir(parents=True, exist_ok=True)
        (d / "f").write_text("x")
    (tmp_path / "link-target").mkdir()
    os.symlink(tmp_path / "link-target", link)
    try:
        store.create_job(job_id="dead", job_name="j", parallelism=1)
        _failed_row(store, "dead", "j", 2, own)
        for chk, loc in ((99, foreign), (98, sibling), (97, climbing), (96, link)):
            _failed_row(store, "dead", "j", chk, loc)
        store.set_job_status("dead", "FAILED", failure_reason="x")

        removed = discard_partial_checkpoints(store, "dead", roots=[str(root)])
    finally:
        store.close()
    assert removed == [str(own)] and not own.exists()
    for d in (foreign, sibling, climbing):
        assert (d / "f").exists(), d
    assert (tmp_path / "link-target").exists()
