"""Issue 42, item 9: ``ckpt jobs`` printed a job name from the metadata DB raw, so
``ESC ] 0 ; PWNED BEL`` retitled the user's terminal (and ``ESC [ 2 J`` could clear it,
``ESC [ 8 m`` hide text). Now every human-readable line shows control characters and
bidirectional overrides as visible escapes; ``--json`` escapes them as JSON does."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

from click.testing import CliRunner

from airflow_checkpoint_provider.engine.catalog import MetadataStore
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.cli.common import terminal_safe

HOSTILE = "orders\x1b]0;PWNED\x07\x1b[2J\u202egnp.exe"


def _db(tmp_path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    with MetadataStore(url) as store:
        store.create_job(job_id="job1", job_name="orders", parallelism=1)
        store.set_job_status("job1", "FAILED", failure_reason="boom \x1b[8mhidden")
        store.add_pending_checkpoint(
            "job1",
            1,
            kind="CHECKPOINT",
            trigger_time=datetime.now(UTC),
            location="/ckpt/\x1b[31mred/chk-1",
        )
    with sqlite3.connect(tmp_path / "meta.db") as db:  # a metadata-DB writer
        db.execute("UPDATE jobs SET job_name = ?", (HOSTILE,))
    return url


def test_ckpt_jobs_and_checkpoints_print_no_terminal_escapes(tmp_path):
    url = _db(tmp_path)
    for argv in (["jobs", "--db", url], ["checkpoints", "job1", "--db", url]):
        out = CliRunner().invoke(main, argv)
        assert out.exit_code == 0, out.output
        assert "\x1b" not in out.output and "\x07" not in out.output and "\u202e" not in out.output
    jobs = CliRunner().invoke(main, ["jobs", "--db", url]).output
    assert "orders\\x1b]0;PWNED\\x07\\x1b[2J\\u202egnp.exe" in jobs  # visible, not obeyed


def test_json_output_keeps_the_value_escaped_by_json(tmp_path):
    url = _db(tmp_path)
    out = CliRunner().invoke(main, ["jobs", "--db", url, "--json"])
    assert out.exit_code == 0 and "\x1b" not in out.output
    assert json.loads(out.output)[0]["job_name"] == HOSTILE


def test_terminal_safe_keeps_newlines_tabs_and_text():
    assert terminal_safe("a\tb\nc é 日本") == "a\tb\nc é 日本"
    assert terminal_safe("\x9b31m\x7f") == "\\x9b31m\\x7f"


def test_error_messages_print_no_terminal_escapes(tmp_path):
    """Issue 42 gap: a ``ClickException`` (``Error: ...``) is printed by click, not through
    ``echo``: its job name came out raw (before: ``ESC ] 0 ; PWNED BEL`` in the output)."""
    url = _db(tmp_path)
    with MetadataStore(url) as store:
        store.set_job_status("job1", "RUNNING")
    out = CliRunner().invoke(main, ["discard-output", "mod:fn", "job1", "--db", url])
    assert out.exit_code == 1, out.output
    assert "orders\\x1b]0;PWNED\\x07" in out.output  # visible, not obeyed
    assert "\x1b" not in out.output and "\x07" not in out.output and "\u202e" not in out.output
    # a message built from a value given on the command line goes the same way
    out = CliRunner().invoke(main, ["cancel", "orders\x1b[2J", "--db", url])
    assert out.exit_code != 0 and "\x1b" not in out.output, out.output
