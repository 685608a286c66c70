"""The progress line of a foreground run: live on a terminal, plain log lines elsewhere."""

import io
import logging
import re

from airflow_checkpoint_provider.engine.runners.jobmaster.progress import ProgressReporter

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_terminal_gets_a_live_line_with_records_and_the_last_checkpoint():
    out = io.StringIO()
    progress = ProgressReporter("orders", stream=out, force_terminal=True,
                                refresh_per_second=20)
    assert progress.interactive
    progress.update(status="RUNNING", records_in=1000, records_out=900)
    progress.update(records_in=3000, records_out=2900, last_checkpoint_id=7,
                    last_checkpoint_duration_ms=42.4, checkpoints_failed=0, restarts=1)
    progress.close()
    progress.close()  # idempotent
    screen = ANSI.sub("", out.getvalue())
    last = [line for line in screen.replace("\r", "\n").splitlines() if line.strip()][-1]
    assert last.startswith("orders  RUNNING  in 3,000")
    assert "out 2,900" in last and "checkpoint 7: 42 ms" in last


def test_without_a_terminal_progress_is_logged_at_most_every_interval(caplog):
    caplog.set_level(logging.INFO, logger="airflow_checkpoint_provider.engine.runners.jobmaster.progress")
    progress = ProgressReporter("orders", stream=io.StringIO(), log_interval_s=3600)
    assert not progress.interactive
    progress.update(status="RUNNING", records_in=10, records_out=0)
    for n in range(2, 50):
        progress.update(records_in=n * 10, records_out=n * 10 - 5)  # within the interval
    progress.update(last_checkpoint_id=3, last_checkpoint_duration_ms=12, attempt_note="x")
    progress.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # the first update and the final line
    assert lines[0] == "orders  RUNNING  in 10  out 0  no checkpoint yet"
    assert lines[1].startswith("orders  RUNNING  in 490 (")
    assert "out 485  checkpoint 3: 12 ms, 0 s ago  attempt_note=x" in lines[1]
    progress.update(records_in=1)  # after close: ignored
    assert progress.fields["records_in"] == 490
