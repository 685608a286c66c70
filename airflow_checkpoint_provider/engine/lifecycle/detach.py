"""``ckpt run --detach``: start a job in a background process and return once it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from ..catalog.models import JobStatus
from ..datastream.api import DEFAULT_METADATA_ENV, Pipeline
from ..errors import EngineError
from ..fs.private import makedirs_private, open_private
from ..settings import CLIENT_POLL_SECONDS


def start_detached(pipeline: Pipeline, argv: list[str], *, job_id: str | None,
                   log_file: str | None, timeout: float, metadata_url: str | None = None,
                   progress: Callable[[str], None] | None = None,
                   progress_every_s: float = 10.0) -> dict:
    """Start ``ckpt <argv>`` in a new session (it outlives this process) with ``--job-id``
    fixed, then wait until the job row is RUNNING (or already ended). ``progress`` gets a
    line on each status change and every ``progress_every_s`` seconds of waiting: what it
    waits for, for how long, and the job log's last line.

    The metadata DB URL (it may hold a password) goes to the child in its environment
    (``$CKPT_METADATA_URL``), never in ``argv`` where ``ps`` shows it to every local user."""
    if "--db" in argv or any(a.startswith("--db=") for a in argv):
        raise EngineError("start_detached: pass the metadata DB URL as metadata_url, not as "
                          "--db in argv (argv is visible to every local user)")
    from ..catalog import MetadataStore

    job_id = job_id or uuid.uuid4().hex
    if "--job-id" not in argv:
        argv = [*argv, "--job-id", job_id]
    log_file = os.path.abspath(log_file or f"ckpt-{pipeline.name}-{job_id[:8]}.log")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    url = metadata_url or pipeline.metadata_url
    if url:
        env[DEFAULT_METADATA_ENV] = url
    makedirs_private(os.path.dirname(log_file))
    with open_private(log_file, "ab", append=True) as log:
        proc = subprocess.Popen([sys.executable, "-m", "airflow_checkpoint_provider.engine.cli",
                                 *argv], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    store = MetadataStore(pipeline.metadata_url)
    start = time.monotonic()
    deadline = start + timeout
    said: tuple[str, int] | None = None
    if progress:
        progress(f"started job {pipeline.name} ({job_id}), pid {proc.pid}; waiting up to "
                 f"{timeout:.0f} s for it to be RUNNING (a Spark application takes about a "
                 f"minute to start); log: {log_file}")
    try:
        while True:
            job = store.get_job(job_id)
            status = job.status if job is not None else "starting (no job row yet)"
            waited = int(time.monotonic() - start)
            if progress and (said is None or said[0] != status
                             or waited - said[1] >= progress_every_s):
                last = _last_line(log_file)
                progress(f"job {job_id[:8]}: {status} after {waited} s"
                         + (f"; log: {last}" if last else ""))
                said = (status, waited)
            if job is not None and job.status != JobStatus.CREATED and job.status != JobStatus.RESTARTING:
                return {"job_id": job_id, "job_name": job.job_name, "status": job.status,
                        "pid": proc.pid, "log_file": log_file, "metadata_url": store.safe_url}
            if proc.poll() is not None:
                raise EngineError(f"detached job {job_id} exited with code {proc.returncode} "
                                  f"before running; see {log_file}:\n{_tail(log_file)}")
            if time.monotonic() > deadline:
                raise EngineError(f"detached job {job_id} is not RUNNING after {timeout:.0f} s "
                                  f"(pid {proc.pid}); see {log_file}")
            time.sleep(CLIENT_POLL_SECONDS)
    finally:
        store.close()


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def _last_line(path: str, limit: int = 160) -> str:
    """The log's last non-empty line, shortened (for a progress line)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    last = next((ln for ln in reversed(lines) if ln), "")
    return last if len(last) <= limit else last[:limit - 3] + "..."
