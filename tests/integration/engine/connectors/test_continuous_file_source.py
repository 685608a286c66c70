"""FileSource(monitor_interval=...): files that land while the job runs are read once,
across failures and restarts, and finished files leave the state after retain_seconds."""

import json
import os
import time

import pytest
from pipelines import Background, FaultPlan, RunningSum, check_exactly_once, read_committed

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    ConfigurationError,
    FileSink,
    FileSource,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.snapshot.codec import load_snapshot
from airflow_checkpoint_provider.engine.state.operator_state import entry_value

pytestmark = pytest.mark.slow
FILES, PER_FILE, KEYS = 12, 250, 10


def continuous_pipeline(root, faults=None, *, retain_seconds=3600.0):
    p = Pipeline("follow", checkpoint=CheckpointConfig(interval_ms=150, directory=str(root / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=20, delay_ms=0),
                 metadata_url=f"sqlite:///{root}/meta.db")
    (p.source(FileSource(str(root / "in"), format="jsonl", monitor_interval=0.1,
                         retain_seconds=retain_seconds), uid="files", parallelism=2)
      .key_by("key").process(RunningSum(faults), uid="sum", parallelism=2)
      .sink(FileSink(str(root / "out")), uid="out"))
    return p


def land(root, i):
    """Write file i aside, then rename it in (the completion convention)."""
    rows = [{"id": i * PER_FILE + j, "key": f"k{(i * PER_FILE + j) % KEYS}", "value": j % 7}
            for j in range(PER_FILE)]
    tmp = root / "in" / f"_f{i:03d}.jsonl"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.rename(tmp, root / "in" / f"f{i:03d}.jsonl")


def expected(n_files):
    per_key: dict = {}
    for i in range(n_files * PER_FILE):
        e = per_key.setdefault(f"k{i % KEYS}", {"ids": set(), "sum": 0})
        e["ids"].add(i)
        e["sum"] += (i % PER_FILE) % 7
    return per_key


def wait_for_ids(root, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = root / "out"
        if out.exists() and len({r["id"] for r in read_committed(str(out))}) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} records committed")


@pytest.mark.timeout(240)
def test_files_landing_while_running_are_read_exactly_once_across_failures(tmp_path):
    (tmp_path / "in").mkdir()
    land(tmp_path, 0)
    faults = FaultPlan(str(tmp_path / "faults"), [("record", 700), ("kill", 1600),
                                                  ("record", 2600)])
    bg = Background(continuous_pipeline(tmp_path, faults))
    job = bg.wait_running()
    for i in range(1, FILES):
        land(tmp_path, i)
        time.sleep(0.15)
    wait_for_ids(tmp_path, FILES * PER_FILE)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    assert len(faults.fired()) == 3
    check_exactly_once(str(tmp_path / "out"), expected(FILES))
    # a restored job reads only what lands after, never the old files again
    land(tmp_path, FILES)
    bg2 = Background(continuous_pipeline(tmp_path), restore=req.result["location"])
    job2 = bg2.wait_running()
    wait_for_ids(tmp_path, (FILES + 1) * PER_FILE)
    bg2.request(job2.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert bg2.result().status == "STOPPED"
    check_exactly_once(str(tmp_path / "out"), expected(FILES + 1))


@pytest.mark.timeout(120)
def test_finished_files_leave_the_state_after_retain_seconds(tmp_path):
    (tmp_path / "in").mkdir()
    for i in range(4):
        land(tmp_path, i)
    old = time.time() - 120
    for name in os.listdir(tmp_path / "in"):
        os.utime(tmp_path / "in" / name, (old, old))
    bg = Background(continuous_pipeline(tmp_path, retain_seconds=60))
    job = bg.wait_running()
    wait_for_ids(tmp_path, 4 * PER_FILE)
    req = bg.request(job.job_id, "SAVEPOINT")
    bg.request(job.job_id, "CANCEL")
    bg.result()
    state = load_snapshot(req.result["location"]).operators["files"]
    entries = {e["state"]: entry_value(e) for s in state["subtasks"]
               for e in s["operator_state"] if entry_value(e)}
    assert not entries.get("splits"), "finished old files were folded into the floor"
    assert entries["discovered_floor"] == [pytest.approx(old, abs=1)]


def test_bad_monitor_options_are_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="monitor_interval must be > 0"):
        FileSource(str(tmp_path), monitor_interval=0)
    with pytest.raises(ConfigurationError, match="retain_seconds must be > 0"):
        FileSource(str(tmp_path), monitor_interval=1, retain_seconds=-1)
