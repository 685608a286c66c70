"""Typed errors of the engine. Each message names the thing that is wrong and what to do."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class PipelineDefinitionError(EngineError):
    """The pipeline is not well formed (missing or duplicate uid, bad parallelism, ...)."""


class ConfigurationError(EngineError):
    """An option has a value the engine cannot use."""


class SparkMasterUnreachableError(ConfigurationError):
    """No master of a ``spark://`` URL accepted a connection: the job is refused before a
    SparkContext starts (whose application client would retry for minutes and end in a
    Java stack). The message names the URL and what each address answered."""


class DeterministicError(EngineError):
    """A failure that happens again on every restart (bad input, a record without its key
    field): the job fails at once instead of using up its restart attempts."""


class BadRecordError(DeterministicError):
    """A record the pipeline cannot process as defined (e.g. its key field is missing)."""


class InvalidNameError(ConfigurationError):
    """A job name, job id or operator uid that cannot safely become part of a path
    (see :mod:`airflow_checkpoint_provider.engine.names`)."""


class JobNameInUseError(ConfigurationError):
    """A job of this name is live (recent heartbeat): one live job per name."""


class JobLostError(EngineError, ValueError):
    """The job was declared LOST (no heartbeat within the timeout): it never runs again, its
    name may belong to another job now."""


class JobIdInUseError(ConfigurationError, ValueError):
    """A new job was given the id of a job that already exists in the metadata DB."""


class CheckpointDeclined(EngineError):
    """A task could not take a checkpoint; the checkpoint is aborted."""


class SinkTransactionConflictError(EngineError):
    """A sink cannot stage an epoch now without waiting for a transaction of its own whose
    checkpoint is not resolved yet (PostgreSQL upsert: a row lock of a prepared
    transaction). The task fails instead of waiting forever; the failover resolves it."""


class SinkLockTimeoutError(EngineError):
    """A sink's barrier could not write its epoch within its lock timeout: another session
    holds or waits for a conflicting lock on the sink's table (a DDL statement queued behind
    the sink's own prepared transaction). The message names the table, the lock, the blocking
    backend's pid and its statement. The task fails instead of waiting without end (a silent
    wedge: a task thread waiting on a lock cannot commit the checkpoint that would free it);
    the failover resolves what the sink prepared."""


class CheckpointStorageError(EngineError):
    """Reading or writing checkpoint files failed."""


class CorruptCheckpointError(EngineError):
    """A `_metadata` file or a state file does not match its checksum or format."""


class RestoreError(EngineError):
    """A checkpoint or savepoint cannot be restored into this pipeline."""


class UnsafeRestoreFallbackError(RestoreError):
    """``restore="latest"`` would fall back past output that earlier jobs committed and a
    sink cannot remove (it would be written twice)."""


class UntrustedSnapshotError(RestoreError):
    """A snapshot to restore does not carry a valid HMAC under the key in use (this metadata
    DB's snapshot key, or ``$CKPT_SNAPSHOT_HMAC_KEY``): it was not written by a job of this
    deployment, or it was modified. Restore it only with the explicit trust flag
    (``trust_snapshot=True``, ``ckpt run --trust-snapshot``)."""


class StateMigrationError(RestoreError):
    """A state's declared kind or serializer changed between the snapshot and the pipeline."""


class JobFailedError(EngineError):
    """The job failed and the restart strategy gave up."""


class StateValueError(DeterministicError, TypeError):
    """A value a state cannot keep: it would not come back from a checkpoint as an equal
    value of the same type (see :mod:`airflow_checkpoint_provider.engine.typed_codec`).
    Raised by ``update()``/``put()``/``add()``, naming the operator uid, the state and the
    type; nothing is stored."""


class RepeatedFailureAfterRestoreError(JobFailedError, RestoreError):
    """The same failure (same operator uid, phase, exception type and message) followed each
    of the last N restores with no checkpoint completing in between
    (``RestartStrategy.identical_failures``): restarting again cannot help, so the job fails
    at once with that diagnosis instead of spending its remaining restarts."""


class SlotsNotReleasedError(EngineError):
    """The tasks of a failed attempt still hold the cores the next attempt needs (a Spark
    barrier stage whose tasks did not end after cancellation): the attempt is not started."""


class SparkProcessLostError(JobFailedError):
    """A process of the Spark application a job runs on died: its driver JVM (Py4J cannot
    reach it: the SparkContext is gone and no restart on it can work, so the job fails at
    once) or an executor. The message names which, the application and its master."""
