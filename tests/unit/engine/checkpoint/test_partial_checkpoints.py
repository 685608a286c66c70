"""Partial checkpoint directories of an ended job are deleted; nothing of a live job is."""

import os
from datetime import UTC, datetime

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.checkpoint.partial import discard_partial_checkpoints


def _job_with_checkpoints(store, root, job_id):
    store.create_job(job_id=job_id, job_name="j", parallelism=1)
    locations = {}
    for chk, status in [(1, "COMPLETED"), (2, "FAILED"), (3, "PENDING"), (4, "CORRUPT")]:
        loc = os.path.join(root, "j", job_id, f"chk-{chk}")  # <root>/<name>/<id>/chk-N
        os.makedirs(loc)
        open(os.path.join(loc, "x.state"), "wb").close()
        store.add_pending_checkpoint(job_id, chk, kind="CHECKPOINT",
                                     trigger_time=datetime.now(UTC), location=loc)
        if status == "FAILED":
            store.fail_checkpoint(job_id, chk, reason="declined")
        elif status != "PENDING":
            store.set_checkpoint_status(job_id, [chk], status)
        locations[chk] = loc
    return locations


def test_partial_checkpoints_of_an_ended_job_are_deleted_and_live_jobs_untouched(tmp_path):
    store = MetadataStore("sqlite:///" + str(tmp_path / "meta.db"))
    try:
        dead = _job_with_checkpoints(store, tmp_path, "dead")
        store.set_job_status("dead", "FAILED", failure_reason="x")  # one live job per name
        live = _job_with_checkpoints(store, tmp_path, "live")
        store.set_job_status("live", "RUNNING")
        assert discard_partial_checkpoints(store, "live") == []
        assert all(os.path.exists(p) for p in live.values())
        assert sorted(discard_partial_checkpoints(store, "dead")) == [dead[2], dead[3]]
        assert [os.path.exists(dead[c]) for c in (1, 2, 3, 4)] == [True, False, False, True]
        assert [r.status for r in store.list_checkpoints("dead")] == [
            "COMPLETED", "FAILED", "FAILED", "CORRUPT"]
    finally:
        store.close()
