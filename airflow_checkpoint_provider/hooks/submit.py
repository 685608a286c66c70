"""Hook launching a checkpointed job: ``spark-submit`` of the engine's entry point.

Builds on :class:`SparkSubmitHook` (the ``spark`` connection gives master, deploy mode,
queue, spark binary); the application is ``airflow_checkpoint_provider/engine/launch.py`` and
its arguments are those of ``ckpt run``. ``runner="local"`` runs the same job with the
engine's local runner (``python -m airflow_checkpoint_provider.engine.cli run``) instead —
no Spark, for small jobs and tests.

Two modes:

* :meth:`CheckpointSubmitHook.submit_blocking` — run until the job ends (the spark-submit
  output goes to the task log); a non-zero exit raises.
* :meth:`CheckpointSubmitHook.submit_detached` — start the job in its own session (it
  outlives the Airflow task), its output going to a log file, and return once the job row in
  the metadata DB is RUNNING (or ended). Long-running jobs are then controlled through the
  metadata DB only.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowException

from airflow_checkpoint_provider.engine.client import (
    LAUNCH_SCRIPT,
    METADATA_URL_ENV,
    SHIP_CODE_ENV,
    CheckpointOverrides,
    JobRecord,
    JobStatus,
    MetadataStore,
    Restore,
    RunRequest,
    code_archives,
    makedirs_private,
    user_temp_dir,
)
from airflow_checkpoint_provider.hooks.job_env import UnsafeJobEnvironmentError, check_job_env
from airflow_checkpoint_provider.hooks.launcher import record_launch, tail
from airflow_checkpoint_provider.hooks.secrets import (
    SPARK_ENV_PREFIX,
    SPARK_REDACTION_REGEX,
    mask_url_secrets,
)

__all__ = ["STARTED_STATUSES", "CheckpointSubmitHook", "UnsafeJobEnvironmentError", "tail"]

#: ``module.path:function`` (no option-like or path-like value reaches a command line)
PIPELINE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")

#: Job statuses after which a detached launch stops waiting.
STARTED_STATUSES = (JobStatus.RUNNING, JobStatus.FINISHED, JobStatus.STOPPED, JobStatus.CANCELED,
                    JobStatus.FAILED)


class CheckpointSubmitHook(SparkSubmitHook):
    """
    Launch a checkpointed job with ``spark-submit`` (or the engine's local runner).

    :param request: the run, as the submit operator built it (the engine's ``RunRequest``:
        pipeline, job id and name, restore, checkpoint overrides, fencing, runner). Give
        either a request or the options below that it holds (``pipeline`` ... ``runner``),
        not both: an option given beside a request raises ``ValueError`` naming it.
    :param pipeline: ``module:function`` returning the engine's ``Pipeline``.
    :param job_id: job id to give the job (the metadata DB key).
    :param job_name: job name (overrides the pipeline's name).
    :param metadata_url: SQLAlchemy URL of the metadata DB the job writes to.
    :param restore: ``"latest"``, a checkpoint/savepoint path, or ``None``.
    :param allow_non_restored_state: restore even if the snapshot has state for operators the
        job no longer has.
    :param trust_snapshot: restore a snapshot not signed with the metadata DB's key
        (``--trust-snapshot``: a savepoint of another deployment).
    :param fence_sinks: hold every sink's commits (``--fence-sinks``: a blue-green
        validation run that publishes nothing).
    :param checkpoint_dir: checkpoint directory (overrides the pipeline's).
    :param savepoint_dir: default savepoint directory of the job.
    :param interval_ms: checkpoint interval (``0``: only the final checkpoint).
    :param restart: restart strategy, e.g. ``fixed:3:1000``.
    :param runner: ``"spark"`` (spark-submit, the default) or ``"local"`` (no Spark).
    :param log_dir: where detached jobs write their log file.
    :param ship_code: send the engine and the pipeline's package to the executors as
        ``--py-files`` archives (executors then need only the third-party dependencies, in
        the Python that ``conf={"spark.pyspark.python": ...}`` names); default: executors
        run this interpreter with its ``sys.path`` (hosts that share the install).
    :param code_cache_dir: where the archives are built (default: the private
        ``checkpoint-code`` in this user's private temp base, ``$CKPT_TEMP_DIR`` or
        ``$TMPDIR/airflow-checkpoint-<uid>``; an existing directory must belong to this user
        and be writable by nobody else).
    :param conn_id: the Spark connection (master, deploy mode).
    :param kwargs: passed to :class:`SparkSubmitHook` (``conf``, ``env_vars``, ...).
        ``env_vars`` holds options the pipeline reads; interpreter, loader and launcher
        variables (``BASH_ENV``, ``LD_*``, ``PYTHON*``, ``PYSPARK_*``, ``SPARK_*``,
        ``BROWSER``, ``JAVA_TOOL_OPTIONS``, ...) raise :class:`UnsafeJobEnvironmentError`
        (:mod:`~airflow_checkpoint_provider.hooks.job_env`).
    """

    def __init__(self, *, pipeline: str | None = None, job_id: str | None = None,
                 job_name: str | None = None, metadata_url: str,
                 restore: str | None = None, allow_non_restored_state: bool = False,
                 trust_snapshot: bool = False, checkpoint_dir: str | None = None, savepoint_dir: str | None = None,
                 interval_ms: int | None = None, restart: str | None = None,
                 runner: str | None = None, log_dir: str | None = None, ship_code: bool = False,
                 code_cache_dir: str | None = None, conn_id: str = "spark_default",
                 fence_sinks: bool = False, request: RunRequest | None = None,
                 **kwargs: Any) -> None:
        if request is not None:  # the operator's request: nothing beside it may say otherwise
            loose = {"pipeline": pipeline, "job_id": job_id, "job_name": job_name,
                     "restore": restore, "allow_non_restored_state": allow_non_restored_state,
                     "trust_snapshot": trust_snapshot, "checkpoint_dir": checkpoint_dir,
                     "savepoint_dir": savepoint_dir, "interval_ms": interval_ms,
                     "restart": restart, "runner": runner, "fence_sinks": fence_sinks}
            given = sorted(name for name, value in loose.items()
                           if value is not None and value is not False)
            if given:
                raise ValueError(f"{', '.join(given)} given beside request=: the request "
                                 "holds the run's options; set them on the RunRequest")
            pipeline, job_id, job_name = request.pipeline, request.job_id, request.job_name
            runner = request.runner
        runner = runner or "spark"
        if not job_id or not job_name:
            raise ValueError("a submission needs job_id and job_name (or a request with both)")
        if runner not in ("spark", "local"):
            raise ValueError(f"runner must be 'spark' or 'local', not {runner!r}")
        if not isinstance(pipeline, str) or not PIPELINE_REF.fullmatch(pipeline):
            raise ValueError(f"pipeline {pipeline!r} must be a reference module.path:function "
                             f"(the whole value must match {PIPELINE_REF.pattern})")
        self.pipeline = pipeline
        self.job_id = job_id
        self.job_name = job_name
        self.metadata_url = metadata_url
        self.runner = runner
        self.log_dir = log_dir
        #: what the job runs with (the runner: this hook's), serialized once: the arguments
        #: of ``ckpt run``, which the launch script and the local CLI read back
        self.request = request or RunRequest(
            pipeline=pipeline, job_id=job_id, job_name=job_name, restore=Restore.parse(restore),
            allow_non_restored_state=allow_non_restored_state, trust_snapshot=trust_snapshot,
            fence_sinks=fence_sinks, restart=restart or None, runner=runner,
            checkpoint=CheckpointOverrides(interval_ms=interval_ms,
                                           directory=checkpoint_dir or None,
                                           savepoint_directory=savepoint_dir or None))
        self.engine_args = self.request.to_argv()
        # env_vars may come from a DAG run's conf: no variable that makes bash, the JVM or
        # Python run other code, whoever passes it (UnsafeJobEnvironmentError names it)
        env: dict[str, str] = check_job_env(kwargs.pop("env_vars", None))
        # spark-submit must run this interpreter (the one with the package) and be found on
        # PATH: the connection's spark-binary is a name, not a path.
        bin_dir = os.path.dirname(sys.executable)
        path = os.environ.get("PATH", "")
        if bin_dir not in path.split(os.pathsep):
            env["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
        # The metadata DB URL may hold a password: pass it in the environment (``--db``'s
        # env var), not on a command line every ``ps`` shows.
        env[METADATA_URL_ENV] = metadata_url
        self.ship_code = ship_code and runner == "spark"
        if self.ship_code:
            archives = code_archives(pipeline, code_cache_dir)  # private, hash-checked
            kwargs["py_files"] = ",".join([*archives, *filter(None, [kwargs.get("py_files")])])
            env[SHIP_CODE_ENV] = "1"  # executors: the cluster's Python, not this interpreter
        else:
            env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        kwargs.setdefault("name", f"ckpt-{job_name}")
        user_properties = kwargs.pop("properties_file", None)
        # SparkSubmitHook would put env_vars on the command line (--conf ...appMasterEnv.X=V
        # on YARN and Kubernetes) or refuse them (standalone cluster mode): this hook passes
        # them itself, never in argv (the DB URL holds a password)
        super().__init__(conn_id=conn_id, application_args=self.engine_args, env_vars=None, **kwargs)
        mask_url_secrets(metadata_url)
        self._job_env = env
        self._env = dict(env)  # spark-submit's (or the local runner's) own environment
        self._conf = {"spark.redaction.regex": SPARK_REDACTION_REGEX, **(self._conf or {})}
        self._properties_file = user_properties
        self._properties_fd: int | None = None  # the remote driver's properties (in memory)
        self._properties_path: str | None = None  # or their file, where memfd is missing
        if self.runner == "spark" and self._remote_driver():
            self._properties_file = self._write_properties(user_properties)

    # -- where the driver runs -----------------------------------------------------------------

    def _remote_driver(self) -> bool:
        """Whether the driver (or YARN's application master) runs elsewhere and gets its
        environment through Spark configuration."""
        return bool(self._is_yarn or self._is_kubernetes
                    or self._connection["deploy_mode"] == "cluster")

    def _write_properties(self, user_properties: str | None) -> str:
        """A ``--properties-file`` holding the job's environment for the remote driver --
        ``spark.yarn.appMasterEnv.*`` on YARN, ``spark.kubernetes.driverEnv.*`` on Kubernetes,
        ``spark.ckpt.env.*`` (read back by the launch script) on a standalone cluster -- after
        the user's own properties. It holds the metadata DB URL and its password, so it is
        never a file on disk (:meth:`_properties_channel`)."""
        if self._is_yarn:
            prefix = "spark.yarn.appMasterEnv."
        elif self._is_kubernetes:
            prefix = "spark.kubernetes.driverEnv."
        else:
            prefix = SPARK_ENV_PREFIX
        lines = []
        if user_properties:
            with open(user_properties, encoding="utf-8") as f:
                lines.append(f.read().rstrip("\n"))
        for name, value in self._job_env.items():
            if name != "PATH":
                lines.append(f"{_prop_escape(prefix + name, key=True)}={_prop_escape(value)}")
        return self._properties_channel(("\n".join(lines) + "\n").encode("utf-8"))

    def _properties_channel(self, data: bytes) -> str:
        """Where spark-submit reads the properties: ``/dev/fd/<n>`` of an anonymous in-memory
        file (``memfd_create``, ``0600``, sealed) that only this process and the spark-submit
        it starts hold open (``pass_fds``). Nothing with the password is ever written to disk,
        and the memory is freed once the last of them closes it: spark-submit exits (its
        launcher and its JVM each reopen ``/dev/fd/<n>`` and read it whole), and this hook
        closes its descriptor when it is garbage-collected (:meth:`close_properties`).

        Without ``memfd_create`` (not Linux): a ``0600`` file with a random name in this user's
        private temp directory, deleted as soon as the submission ends -- spark-submit exited,
        failed, or (detached) the job is running -- see :meth:`_release_properties`."""
        if hasattr(os, "memfd_create") and os.path.isdir("/dev/fd"):
            flags = os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)
            fd = os.memfd_create(f"ckpt-{self.job_id}.properties", flags)
            try:
                os.fchmod(fd, 0o600)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                seals = getattr(fcntl, "F_SEAL_SEAL", 0) | getattr(fcntl, "F_SEAL_SHRINK", 0) \
                    | getattr(fcntl, "F_SEAL_GROW", 0) | getattr(fcntl, "F_SEAL_WRITE", 0)
                if seals and hasattr(fcntl, "F_ADD_SEALS"):
                    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # read-only from now on
            except BaseException:
                os.close(fd)
                raise
            self._properties_fd = fd
            return f"/dev/fd/{fd}"
        fd, path = tempfile.mkstemp(dir=user_temp_dir("checkpoint-submit"),
                                    prefix=f"{self.job_id}.", suffix=".properties")  # 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self._properties_path = path
        return path

    def _properties_pass_fds(self) -> tuple[int, ...]:
        """The descriptors spark-submit must inherit (the properties' memfd, if any)."""
        return () if self._properties_fd is None else (self._properties_fd,)

    def _release_properties(self) -> None:
        """Delete the fallback properties file (no-op for the in-memory one): the submission
        ended or the driver started, so spark-submit has read it."""
        path, self._properties_path = self._properties_path, None
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close_properties(self) -> None:
        """Free the remote driver's properties (the memfd, or the fallback file)."""
        self._release_properties()
        fd, self._properties_fd = self._properties_fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close_properties()
        except Exception:  # noqa: BLE001 -- interpreter shutdown: nothing left to free
            pass

    # -- commands ----------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The command that runs the job until it ends."""
        if self.runner == "local":
            return [sys.executable, "-m", "airflow_checkpoint_provider.engine.cli", "run",
                    *self.engine_args]
        return self._build_spark_submit_command(LAUNCH_SCRIPT)

    def _process_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self._job_env.items()})
        env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
        return env

    # -- blocking ----------------------------------------------------------------------------

    def submit_blocking(self) -> None:
        """Run the job until it ends; raise :class:`AirflowException` on a non-zero exit."""
        if self.runner == "spark":
            self._env = {**self._job_env, "PYTHONPATH": self._process_env()["PYTHONPATH"]}
            try:
                self.submit(LAUNCH_SCRIPT, pass_fds=self._properties_pass_fds())
            finally:
                self._release_properties()
            return
        cmd = self.command()
        self.log.info("Running %s", self._mask_cmd(cmd))
        self._submit_sp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, env=self._process_env())
        assert self._submit_sp.stdout is not None
        for line in self._submit_sp.stdout:
            self.log.info("%s", line.rstrip())
        returncode = self._submit_sp.wait()
        if returncode:
            raise AirflowException(f"job {self.job_name} ({self.job_id}) exited with code "
                                   f"{returncode}")

    # -- detached ----------------------------------------------------------------------------

    def log_file(self) -> str:
        """``<log_dir>/<job_name>-<job_id>.log``; the default directory is the private
        ``checkpoint-jobs`` in this user's private temp base (a job's log names paths and
        failures)."""
        if self.log_dir:
            log_dir = makedirs_private(self.log_dir)
        else:
            log_dir = user_temp_dir("checkpoint-jobs")
        return os.path.join(os.path.abspath(log_dir), f"{self.job_name}-{self.job_id}.log")

    def submit_detached(self, *, timeout: float = 300.0, poll_interval: float = 0.5,
                        until: str = "running") -> dict:
        """Start the job in a new session and wait until its row is RUNNING (or ended).

        ``until="standby_ready"`` (a ``standby:JOB`` restore): until the standby says
        ``READY`` in the metadata DB (or took over already); ``until="spawned"``: return once
        the launcher runs (the caller waits in the triggerer). Returns ``{"job_id",
        "job_name", "status", "pid", "log_file", "failure_reason"}`` (status ``READY`` or
        ``SPAWNED`` then). Raises :class:`AirflowException` when the launcher exits with an
        error before the job runs (or at all, when it is the driver: local runner, client
        mode), or ``timeout`` seconds pass. A launcher that is the driver is recorded
        (:mod:`~airflow_checkpoint_provider.hooks.launcher`): a wait in the triggerer on this
        host then fails as soon as it exits before the job or the standby said anything.
        """
        if until not in ("running", "standby_ready", "spawned"):
            raise ValueError(f"until must be running, standby_ready or spawned, not {until!r}")
        cmd = self.command()
        if until == "spawned" and self._properties_path is not None:
            # a properties file on disk (no memfd) is deleted when this returns: wait in the
            # worker until the standby is up (it has read the file then)
            until = "standby_ready"
        log_file = self.log_file()
        # In client mode the driver is this spark-submit process: its own session lets it
        # outlive the task. In cluster mode spark-submit exits 0 once the driver is submitted;
        # the metadata DB then says when the job runs.
        self.log.info("Starting detached: %s (log %s)", self._mask_cmd(cmd), log_file)
        # 0600, and never through a symlink planted where the log goes
        fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "ab") as out:
            try:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        env=self._process_env(),
                                        pass_fds=self._properties_pass_fds())
            except BaseException:
                self._release_properties()
                raise
        # the launcher is the driver (local runner, client mode): a wait in the triggerer on
        # this host can tell that it exited before the job (or the standby) said anything
        local_driver = self.runner == "local" or not self._remote_driver()
        if local_driver:
            record_launch(job_id=self.job_id, job_name=self.job_name, pid=proc.pid,
                          log_file=log_file)
        store = MetadataStore(self.metadata_url, migrate=False)  # the operator checked it exists
        deadline = time.monotonic() + timeout
        try:
            while True:
                if until == "spawned":
                    return self._standby_info("SPAWNED", proc.pid, log_file)
                # the exit first, then the rows: a launcher writes them before it exits
                rc = proc.poll()
                job = store.get_job(self.job_id)
                if job is not None and job.status in STARTED_STATUSES:
                    return self._info(job, proc.pid, log_file)
                if until == "standby_ready" and (standby := store.get_standby(self.job_id)):
                    if standby.is_terminal:
                        raise AirflowException(
                            f"standby job {self.job_name} ({self.job_id}) is "
                            f"{standby.status}: {standby.detail}; log {log_file}")
                    return self._standby_info(standby.status, proc.pid, log_file)
                # a non-zero exit always ends the wait; so does any exit of a launcher that
                # is the driver (in cluster mode spark-submit exits 0 once it submitted)
                if rc is not None and (rc != 0 or local_driver):
                    raise AirflowException(
                        f"job {self.job_name} ({self.job_id}) launcher exited with code {rc} "
                        f"before the job ran"
                        + (f": {job.failure_reason}" if job and job.failure_reason else "")
                        + f"; log {log_file}:\n{tail(log_file)}")
                if time.monotonic() > deadline:
                    raise AirflowException(
                        f"job {self.job_name} ({self.job_id}) is not RUNNING after "
                        f"{timeout:.0f} s (status {job.status if job else 'not created'}); "
                        f"log {log_file}:\n{tail(log_file)}")
                time.sleep(poll_interval)
        finally:
            store.close()
            self._release_properties()  # the job runs (its driver read it) or never will

    def _standby_info(self, status: str, pid: int, log_file: str) -> dict:
        return {"job_id": self.job_id, "job_name": self.job_name, "status": status,
                "pid": pid, "log_file": log_file, "failure_reason": None}

    @staticmethod
    def _info(job: JobRecord, pid: int, log_file: str) -> dict:
        return {"job_id": job.job_id, "job_name": job.job_name, "status": job.status,
                "pid": pid, "log_file": log_file, "failure_reason": job.failure_reason}


def _prop_escape(text: str, *, key: bool = False) -> str:
    """``text`` escaped for a Java properties file (read by spark-submit as UTF-8)."""
    out = (str(text).replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
           .replace("\t", "\\t"))
    if key:
        for ch in "=: #!":
            out = out.replace(ch, "\\" + ch)
    elif out.startswith((" ", "\f")):
        out = "\\" + out
    return out
