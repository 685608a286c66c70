"""Two end-to-end scenarios the keyed-operator tests share (top_n, count_distinct, session
windows, the vectorized aggregate): faults against a failure-free run, and a savepoint taken
at parallelism 2 restored at 3. ``make(root, **options)`` builds the test's pipeline under
``root`` (``rate``, ``faults``, ``out`` and the rescale options are passed through)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from pipelines import Background, FaultPlan

from airflow_checkpoint_provider.engine import Pipeline

#: exceptions and SIGKILLs of a slot process spread over a 20,000-record input
FAULT_POINTS = (("record", 900), ("kill", 6_000), ("record", 11_000), ("kill", 17_500))


def run_with_faults_and_failure_free(make: Callable[..., Pipeline], workdir: Path, *,
                                     rate: float = 3000, points=FAULT_POINTS,
                                     free_out: str | None = None) -> tuple[str, str]:
    """One failure-free run into ``workdir/free`` and one under ``points`` into ``workdir``
    (every fault fired, one restart each, restored from checkpoints and not only from
    scratch); returns the output directories (failure-free, faulty) to compare.
    ``free_out``: the output directory of a failure-free run of the same ``make()`` that
    the caller made already (not run again)."""
    if free_out is None:
        free = workdir / "free"
        free.mkdir()
        result = make(str(free)).run()
        assert result.status == "FINISHED" and result.restarts == 0
        free_out = str(free / "out")
    points = list(points)
    faults = FaultPlan(str(workdir / "faults"), points)
    result = make(str(workdir), rate=rate, faults=faults).run()
    assert result.status == "FINISHED"
    assert len(faults.fired()) == len(points) and result.restarts == len(points)
    assert result.checkpoints_completed >= 2
    return free_out, str(workdir / "out")


def savepoint_then_restore_rescaled(make: Callable[..., Pipeline], workdir: Path,
                                    tmp_path: Path, *, rate: float,
                                    rescale: dict | None = None) -> str:
    """A running job (at ``rate``) stopped with a savepoint after its first checkpoint, then
    restored into another root and metadata DB with ``rescale`` (default parallelism=3) and
    run to the end of the input; returns its output directory (the first run's committed
    files copied in, as a restored job continues the same output)."""
    bg = Background(make(str(workdir), rate=rate))
    job = bg.wait_running(min_checkpoints=1)
    req = bg.request(job.job_id, "STOP_WITH_SAVEPOINT", {"drain": False})
    assert req.status == "SUCCEEDED", req.error
    assert bg.result().status == "STOPPED"
    savepoint = req.result["location"]
    root2 = tmp_path / "restored"
    out = root2 / "out"
    shutil.copytree(workdir / "out", out)
    p = make(str(root2), out=str(out), **(rescale or {"parallelism": 3}))
    result = p.run(restore=savepoint, trust_snapshot=True)  # another metadata DB
    assert result.status == "FINISHED" and result.restored_from == savepoint
    return str(out)
