"""``make demo`` shows progress (issue 54 item 6): a line at least every few seconds while
the venv installs (tools/heartbeat.py around every long step of the Makefile) and while the
DAG runs (the demo prints the task states Airflow records, and a heartbeat between them)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

from repo_paths import REPO_ROOT

from airflow_checkpoint_provider import demo_upgrade

ROOT = str(REPO_ROOT)
HEARTBEAT = os.path.join(ROOT, "tools", "heartbeat.py")


def test_heartbeat_prints_while_a_silent_command_runs_and_keeps_its_exit_code():
    env = dict(os.environ, CKPT_HEARTBEAT_S="0.3")
    out = subprocess.run([sys.executable, HEARTBEAT, "sleeping", "--", "sleep", "2"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0
    beats = [ln for ln in out.stdout.splitlines() if "... still sleeping (" in ln]
    assert len(beats) >= 2, out.stdout
    assert out.stdout.splitlines()[-1].startswith("    done: sleeping in ")
    failed = subprocess.run([sys.executable, HEARTBEAT, "failing", "--", "sh", "-c", "exit 3"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert failed.returncode == 3 and "failed: failing" in failed.stdout


def test_every_long_venv_step_of_the_makefile_goes_through_the_heartbeat(tmp_path):
    dry = subprocess.run(["make", "-n", f"VENV={tmp_path}/venv", "venv"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    text = dry.stdout.replace("\\\n", " ")
    for step in ("pip install --quiet --disable-pip-version-check uv",
                 "uv pip install --quiet -e", "uv pip install --quiet --reinstall",
                 "-m compileall"):
        [line] = [ln for ln in text.splitlines() if step in ln]
        assert "tools/heartbeat.py" in line, line


def test_the_demo_prints_task_state_changes_and_a_heartbeat_while_the_dag_runs(tmp_path):
    """``_run`` as the demo runs ``airflow dags test``: the command here writes the task
    states into an Airflow-like task_instance table as Airflow would."""
    db = tmp_path / "airflow.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE task_instance (dag_id TEXT, task_id TEXT, state TEXT, "
                     "start_date TEXT)")
    script = textwrap.dedent(f"""
        import sqlite3, time
        def put(task, state, at):
            with sqlite3.connect({str(db)!r}) as c:
                c.execute("DELETE FROM task_instance WHERE task_id = ?", (task,))
                c.execute("INSERT INTO task_instance VALUES ('d', ?, ?, ?)", (task, state, at))
        put("stop_v1", "running", "1"); time.sleep(1.5)
        put("stop_v1", "success", "1"); put("start_v2", "running", "2"); time.sleep(2.5)
        put("start_v2", "success", "2")
    """)
    lines: list[str] = []
    rc = demo_upgrade._run([sys.executable, "-c", script], dict(os.environ), 60,
                           str(tmp_path / "demo.log"), what="running the d DAG",
                           watch=demo_upgrade.TaskStates(str(db), "d"), heartbeat_s=0.8,
                           out=lines.append)
    assert rc == 0
    said = [ln.split("] ", 1)[1] for ln in lines]
    for change in ("task stop_v1: running", "task stop_v1: success", "task start_v2: running"):
        assert change in said, lines
    assert any(s.startswith("still running the d DAG (start_v2 running)") for s in said), lines
