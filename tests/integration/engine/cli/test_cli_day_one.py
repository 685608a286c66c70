"""Issue 36, item 6: the errors a user meets on day one end in one line, reading commands
never create a metadata DB, ``postgres://`` URLs work, and ``ckpt run --detach`` says what it
waits for. Seconds each (the Java one starts spark-submit without Java: ~5 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from repo_paths import REPO_ROOT

from airflow_checkpoint_provider.engine.catalog import to_sqlalchemy_url
from airflow_checkpoint_provider.engine.cli import main
from airflow_checkpoint_provider.engine.cli.common import JAVA_MISSING

REPO = str(REPO_ROOT)
EXAMPLE = "airflow_checkpoint_provider.examples.versioned_sum"


def _ckpt(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})})


def test_an_unreachable_postgresql_url_is_one_line():
    res = _ckpt("jobs", "--db", "postgresql+psycopg://nobody@127.0.0.1:1/ckpt")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("Error: metadata DB: OperationalError: connection failed")
    assert "port 1 failed" in res.stderr and "--db" in res.stderr


def test_a_url_of_a_missing_driver_is_one_line():
    res = CliRunner().invoke(main, ["jobs", "--db", "mysql+nodriver://u@h/db"])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
    assert "metadata DB URL" in res.output and "postgresql+psycopg://" in res.output


def test_postgres_urls_are_accepted_as_sqlalchemy_users_expect(postgres_server):
    assert to_sqlalchemy_url("postgres://u:p@h:5/db") == "postgresql+psycopg://u:p@h:5/db"
    assert to_sqlalchemy_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert to_sqlalchemy_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    url = postgres_server.create_database().replace("postgresql+psycopg://", "postgres://")
    runner = CliRunner()
    assert runner.invoke(main, ["db", "upgrade", "--db", url]).exit_code == 0
    res = runner.invoke(main, ["jobs", "--db", url])
    assert res.exit_code == 0 and res.output == "", res.output


def test_reading_commands_never_create_a_sqlite_db(tmp_path):
    where = tmp_path / "no-such-dir"
    for verb in (["jobs"], ["checkpoints", "x"], ["cancel", "x"]):
        res = CliRunner().invoke(main, [*verb, "--db", f"sqlite:///{where}/metadata.db"])
        assert res.exit_code == 1, (verb, res.output)
        assert f"SQLite file {where}/metadata.db does not exist" in res.output
        assert "ckpt db upgrade" in res.output
    assert not where.exists(), "a reading command created the DB's directory"


@pytest.mark.timeout(120)
def test_java_missing_is_one_line(tmp_path):
    res = _ckpt("run", f"{EXAMPLE}:build_v1", "--runner", "spark", "--master", "local[1]",
                "--db", f"sqlite:///{tmp_path}/m.db",
                env={"JAVA_HOME": str(tmp_path / "no-java"), "CKPT_EXAMPLE_RECORDS": "10",
                     "CKPT_EXAMPLE_DIR": str(tmp_path)})
    assert res.returncode == 1
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.strip().splitlines()[-1] == f"Error: {JAVA_MISSING}"


@pytest.mark.timeout(120)
def test_run_detach_says_what_it_waits_for(tmp_path):
    db = f"sqlite:///{tmp_path}/m.db"
    res = _ckpt("run", f"{EXAMPLE}:build_v1", "--detach", "--db", db, "--json",
                "--log-file", str(tmp_path / "job.log"), env={"CKPT_EXAMPLE_DIR": str(tmp_path)})
    try:
        assert res.returncode == 0, res.stderr
        assert "waiting up to 300 s for it to be RUNNING" in res.stderr
        assert f"log: {tmp_path / 'job.log'}" in res.stderr
        assert re.search(r"job [0-9a-f]{8}: RUNNING after \d+ s", res.stderr), res.stderr
        assert res.stdout.lstrip().startswith("{"), "--json output stays clean"
    finally:
        _ckpt("cancel", "versioned-sum", "--db", db)


def test_every_ckpt_verb_the_demos_suggest_exists():
    import airflow_checkpoint_provider.demo as demo
    import airflow_checkpoint_provider.demo_upgrade as demo_upgrade

    verbs = set()
    for module in (demo, demo_upgrade):
        with open(module.__file__) as f:
            verbs |= set(re.findall(r"\bckpt ([a-z][a-z-]+)", f.read()))
    assert verbs, "the demos suggest ckpt commands"
    assert verbs <= set(main.commands), f"no such ckpt verb: {sorted(verbs - set(main.commands))}"
