"""A slot that fails before its tasks run (the job description does not unpickle in it, a
peer connection fails) puts its exception and traceback tail into the job's failure reason
(the local launcher's failure file), not only its exit code.

Local runner, real slot processes: a few seconds."""

from __future__ import annotations

import os

import pytest

from airflow_checkpoint_provider.engine import (
    CheckpointConfig,
    FileSink,
    GeneratorSource,
    JobFailedError,
    Pipeline,
    RestartStrategy,
)
from airflow_checkpoint_provider.engine.catalog import MetadataStore


def _refuse_outside(pid: int):
    if os.getpid() != pid:
        raise RuntimeError("this map function cannot be unpickled outside the driver")
    return _identity


def _identity(record):
    return record


class DriverOnly:
    """Pickles as a call of ``_refuse_outside``: fine in the driver, an error in a slot."""

    def __call__(self, record):
        return record

    def __reduce__(self):
        return _refuse_outside, (os.getpid(),)


@pytest.mark.timeout(180)
def test_a_slot_that_cannot_unpickle_the_job_names_the_error(tmp_path):
    p = Pipeline("slot-fails", checkpoint=CheckpointConfig(interval_ms=200,
                                                           directory=str(tmp_path / "ckpt")),
                 restart_strategy=RestartStrategy.fixed_delay(attempts=1, delay_ms=0),
                 metadata_url="sqlite:///" + str(tmp_path / "meta.db"))
    (p.source(GeneratorSource(100), uid="gen").map(DriverOnly(), name="driver-only")
      .sink(FileSink(str(tmp_path / "out")), uid="out"))
    with pytest.raises(JobFailedError) as err:
        p.run()
    message = str(err.value)
    # before: "... slot 0 process (pid N) exited with code 1" and nothing else
    assert ("slot 0 process (pid " in message
            and ": RuntimeError: this map function cannot be unpickled outside the driver"
            in message), message
    assert "Slot traceback (last lines):" in message and "_refuse_outside" in message
    with MetadataStore("sqlite:///" + str(tmp_path / "meta.db")) as store:
        (job,) = store.list_jobs()
        assert "cannot be unpickled outside the driver" in job.failure_reason


def test_slot_failure_reads_the_exception_line_and_the_traceback_tail(tmp_path):
    from airflow_checkpoint_provider.engine.runners.local import slot_failure

    path = tmp_path / "f.txt"
    assert slot_failure(str(path)) == ""  # killed by a signal: no file
    path.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                    "ConnectionRefusedError: [Errno 111] Connection refused\n")
    text = slot_failure(str(path), lines=2)
    assert text.startswith(": ConnectionRefusedError: [Errno 111] Connection refused\n")
    assert text.endswith('  File "x.py", line 1\nConnectionRefusedError: [Errno 111] '
                         "Connection refused")
