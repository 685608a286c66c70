"""Restore in place (control request ``PROMOTE``, issue 41).

The exactly-once blue-green cut-over without a new job: blue stops with a savepoint, the
fenced green gets ``PROMOTE {snapshot: blue's final savepoint, unfence: true}`` and restores
it inside its running job master (same job id, same application), then publishes. The
published output must equal the failure-free run's, also with a SIGKILL of a green slot
after the promotion (the promoted attempt runs in the fenced attempt's warm slot processes:
the kill hits one of them); and PROMOTE refuses what a fresh start refuses (a fenced snapshot, an
untrusted one) plus what only a running job can get wrong (the snapshot's job still
running, a job that is not fenced), leaving the job running fenced.

Local runner, bounded input: each cut-over test takes ~20-40 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import Counter

import pytest
from cutover_helpers import compare, published_by, reference_rows, staged_by
from pipelines import (
    Background,
    check_exactly_once_rows,
    expected_running_sums,
    running_sum_pipeline,
)

from airflow_checkpoint_provider.engine import read_committed
from airflow_checkpoint_provider.engine.snapshot.codec import encode_metadata, load_snapshot

N, KEYS, SEED, RATE = 20_000, 50, 7, 1000


@pytest.fixture(scope="module")
def reference() -> Counter:
    return reference_rows(num_records=N, num_keys=KEYS, seed=SEED)


def _start_pair(root: str, n: int = N):
    """Blue running under load, green fenced from a savepoint of blue with >= 3 checkpoints."""
    out = os.path.join(root, "out")
    blue_bg = Background(running_sum_pipeline(root, name="rs-blue", num_records=n,
                                              num_keys=KEYS, seed=SEED, rate=RATE, out=out))
    blue = blue_bg.wait_running(min_checkpoints=1)
    sp = blue_bg.request(blue.job_id, "SAVEPOINT", {})
    assert sp.status == "SUCCEEDED", sp.error
    green_p = running_sum_pipeline(root, name="rs-green", num_records=n, num_keys=KEYS,
                                   seed=SEED, rate=RATE, out=out)
    green_p.version = "v2"
    green_bg = Background(green_p, restore=sp.result["location"], fence_sinks=True)
    green = green_bg.wait_running(min_checkpoints=3, timeout=90)
    assert published_by(out, green.job_id) == [], "fenced green published nothing"
    return out, blue_bg, blue, green_bg, green, sp.result["location"]


def _promote(root: str, *, kill_after: bool, warm: bool = True) -> tuple[Counter, dict]:
    out, blue_bg, blue, green_bg, green, _ = _start_pair(root)
    final = blue_bg.request(blue.job_id, "STOP_WITH_SAVEPOINT", {})
    assert final.status == "SUCCEEDED", final.error
    # at once: blue may still be winding down (committing, ending): the promotion waits
    # for it to end, since the snapshot is its final savepoint
    t0 = time.monotonic()
    promote = green_bg.request(green.job_id, "PROMOTE",
                               {"snapshot": final.result["location"], "unfence": True})
    promote_s = time.monotonic() - t0
    assert blue_bg.result().status == "STOPPED"
    assert promote.status == "SUCCEEDED", promote.error
    assert promote.result["restored_from"] == final.result["location"]
    assert promote.result["fenced"] is False
    # warm slots: the promoted attempt runs in the fenced attempt's slot processes, which
    # ended their fenced tasks first (each registered again as the next attempt)
    first, promoted_attempt = green_bg.store.list_attempts(green.job_id)[-2:]
    assert promoted_attempt.attempt == promote.result["attempt"]
    pids = ({p["pid"] for p in first.placement}, {p["pid"] for p in promoted_attempt.placement})
    if warm:
        assert pids[0] == pids[1], (first.placement, promoted_attempt.placement)
        assert all("recycle" in p["phases"] for p in promoted_attempt.placement)
    else:  # the slots did not come back in time: new processes, under a later attempt number
        assert not pids[0] & pids[1], (first.placement, promoted_attempt.placement)
        assert promoted_attempt.attempt == first.attempt + 2
    killed = None
    if kill_after:  # SIGKILL a slot of the promoted attempt once it committed a checkpoint
        store = green_bg.store
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [
                c for c in store.list_checkpoints(green.job_id)
                if c.status in ("COMPLETED", "SUBSUMED")
                and c.checkpoint_id > final.result["checkpoint_id"]]:
            time.sleep(0.05)
        placement = store.list_attempts(green.job_id)[-1].placement
        killed = placement[0]["pid"]
        os.kill(killed, signal.SIGKILL)
    result = green_bg.result(timeout=180)
    assert result.status == "FINISHED", result.failure_reason
    assert result.job_id == green.job_id, "the same job went live: no new job"
    if kill_after:
        assert result.restarts >= 1, f"slot process {killed} was killed: a failover"
    attempts = green_bg.store.list_attempts(green.job_id)
    promoted = [a for a in attempts if a.restored_from == final.result["location"]]
    assert promoted, [(a.attempt, a.restored_from) for a in attempts]
    published = list(read_committed(out))
    check_exactly_once_rows(published, expected_running_sums(N, KEYS, SEED))
    assert published_by(out, blue.job_id) and published_by(out, green.job_id)
    left = staged_by(out, green.job_id)
    assert left == [], f"green left staged files: {left}"
    return Counter((r["key"], r["id"]) for r in published), {"promote_s": round(promote_s, 2),
                                                              "restarts": result.restarts}


@pytest.mark.timeout(300)
def test_promote_in_place_is_exactly_once(tmp_path, reference):
    rows, info = _promote(str(tmp_path), kill_after=False)
    print("promote in place:", compare(rows, reference), info)
    assert compare(rows, reference) == {"rows": N, "duplicates": 0, "missing": 0,
                                         "unexpected": 0}


@pytest.mark.timeout(300)
def test_sigkill_after_promote_in_place_is_exactly_once(tmp_path, reference):
    rows, info = _promote(str(tmp_path), kill_after=True)
    print("promote in place, SIGKILL after:", compare(rows, reference), info)
    assert compare(rows, reference) == {"rows": N, "duplicates": 0, "missing": 0,
                                         "unexpected": 0}


@pytest.mark.timeout(300)
def test_promote_starts_new_slots_when_the_recycled_ones_do_not_come_back(
        tmp_path, reference, monkeypatch):
    """No time for the recycled slots to register again: the fenced attempt's processes are
    stopped and the promoted attempt starts in new ones, still exactly once."""
    from airflow_checkpoint_provider.engine.runners.jobmaster import attempt

    monkeypatch.setattr(attempt, "RECYCLE_WAIT_SECONDS", 0.0)
    rows, info = _promote(str(tmp_path), kill_after=False, warm=False)
    print("promote in place, cold slots:", compare(rows, reference), info)
    assert compare(rows, reference) == {"rows": N, "duplicates": 0, "missing": 0,
                                         "unexpected": 0}


def _unsigned_copy(location: str, target: str) -> str:
    shutil.copytree(location, target)
    snap = load_snapshot(target, check_hmac=False)
    with open(os.path.join(target, "_metadata"), "wb") as f:
        f.write(encode_metadata({k: v for k, v in snap.doc.items() if k != "hmac"}))
    return target


@pytest.mark.timeout(300)
def test_promote_refusals_leave_the_job_running_fenced(tmp_path, monkeypatch):
    monkeypatch.delenv("CKPT_SNAPSHOT_HMAC_KEY", raising=False)
    root = str(tmp_path)
    # blue must still run when the first request comes, also on a loaded machine
    out, blue_bg, blue, green_bg, green, sp = _start_pair(root, n=10 * N)
    store = green_bg.store

    def own() -> str:
        """A savepoint of green (fenced): unlike a checkpoint, retention never subsumes it
        between this read and the job master's."""
        req = green_bg.request(green.job_id, "SAVEPOINT", {})
        assert req.status == "SUCCEEDED", req.error
        return req.result["location"]

    cases = [
        ({"snapshot": sp}, "still publishes"),            # blue is RUNNING
        ({"snapshot": own}, "fenced sinks"),              # a fenced snapshot, unfenced
        ({"snapshot": _unsigned_copy(sp, os.path.join(root, "unsigned"))},
         "UntrustedSnapshotError"),
        ({}, "needs params.snapshot"),
        ({"snapshot": sp, "unfence": "yes"}, "unfence must be true or false"),
    ]
    for params, expected in cases:
        params = {k: v() if callable(v) else v for k, v in params.items()}
        req = green_bg.request(green.job_id, "PROMOTE", params)
        assert req.status == "FAILED" and expected in req.error, (params, req.error)
        assert req.error.startswith("PROMOTE refused")
    # an unfenced job cannot be promoted: it published past its own state
    req = blue_bg.request(blue.job_id, "PROMOTE", {"snapshot": own(), "unfence": False})
    assert req.status == "FAILED" and "is not fenced" in req.error, req.error
    # green kept running fenced, checkpointing, publishing nothing, on its first attempt
    before = len([c for c in store.list_checkpoints(green.job_id) if c.status == "COMPLETED"])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(
            [c for c in store.list_checkpoints(green.job_id) if c.status == "COMPLETED"]) <= before:
        time.sleep(0.1)
    assert store.get_job(green.job_id).status == "RUNNING"
    assert len(store.list_attempts(green.job_id)) == 1
    assert published_by(out, green.job_id) == []
    for bg, job in ((green_bg, green), (blue_bg, blue)):
        assert bg.request(job.job_id, "CANCEL").status == "SUCCEEDED"
        assert bg.result().status == "CANCELED"
