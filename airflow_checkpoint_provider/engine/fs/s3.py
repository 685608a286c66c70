"""Checkpoint storage on S3 (or any S3-compatible store: MinIO, Ceph, moto) through boto3.

Locations are URIs ``s3://<bucket>/<key prefix>``; the layout under them is the one of
local checkpoint directories (see :mod:`.storage`), with "directories" being key prefixes
ending in ``/``.

Configuration (read from the environment when a client is first needed in a process):

``CKPT_S3_ENDPOINT_URL`` (else ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``)
    endpoint of an S3-compatible store, e.g. ``http://minio:9000``; unset: AWS S3.
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` / ``AWS_PROFILE`` /
``AWS_DEFAULT_REGION``
    credentials and region, resolved the normal boto3 way (env, config files, instance role).
``CKPT_S3_MAX_ATTEMPTS`` (default 5)
    attempts per request, botocore "standard" retry mode: exponential backoff with jitter
    on throttling, 5xx answers and connection errors.
``CKPT_S3_TIMEOUT_S`` (default 10)
    connect and read timeout of one attempt. Together with the attempts this bounds how long
    an upload hangs in an S3 outage (seconds, not minutes): the task then declines the
    checkpoint and keeps processing, and a later checkpoint completes once S3 is back.
``CKPT_S3_MULTIPART_THRESHOLD`` (default 8 MiB) / ``CKPT_S3_MULTIPART_CHUNKSIZE`` (default 8 MiB)
    files at least this large are uploaded in parts (``upload_fileobj`` + ``TransferConfig``);
    S3 needs parts of at least 5 MiB (except the last).

Writes are atomic without a temporary object: a PUT (or a completed multipart upload) is
visible all at once or not at all, so ``atomic=True`` needs nothing extra.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import threading
from typing import Any

from ..errors import CheckpointStorageError
from ..settings import (
    S3_ENDPOINT_URL,
    S3_MAX_ATTEMPTS,
    S3_MULTIPART_CHUNKSIZE,
    S3_MULTIPART_THRESHOLD,
    S3_TIMEOUT,
)
from .pieces import FileData, pieces_of

log = logging.getLogger(__name__)

SCHEME = "s3://"
MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB  # S3's minimum size of every part but the last
DELETE_BATCH = 1000      # the most keys one DeleteObjects request accepts
LIST_PAGE_SIZE = 1000    # keys per ListObjectsV2 page (S3's maximum)

_clients: dict[tuple, Any] = {}
_clients_lock = threading.Lock()


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")`` (no leading or trailing slash on the key)."""
    if not uri.startswith(SCHEME):
        raise CheckpointStorageError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len(SCHEME):].partition("/")
    if not bucket:
        raise CheckpointStorageError(f"{uri!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, key.strip("/")


def endpoint_url() -> str | None:
    """The configured S3 endpoint, or ``None`` for AWS S3."""
    configured = S3_ENDPOINT_URL.get()
    if configured:
        return configured
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        value = os.environ.get(name)
        if value:
            return value
    return None


def _client_settings() -> tuple:
    """Everything a client depends on. A cache key, kept in memory only: the secret is
    represented by a digest so that a rotated secret gets a new client."""
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return (
        os.getpid(),  # a client must not cross a fork (its connection pool would be shared)
        endpoint_url(),
        os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION"),
        os.environ.get("AWS_PROFILE"),
        os.environ.get("AWS_ACCESS_KEY_ID"),
        hashlib.sha256(secret.encode()).hexdigest() if secret else None,
        os.environ.get("AWS_SESSION_TOKEN") is not None,
        S3_MAX_ATTEMPTS.get(),
        S3_TIMEOUT.get(),
    )


def s3_client():
    """The process's boto3 S3 client for the current configuration.

    boto3 clients are thread-safe, so upload threads share one; it is created under a lock
    (creating clients concurrently from one session is not safe) and cached per process and
    settings (a changed endpoint or key gets a new client). Credentials are never logged.
    """
    settings = _client_settings()
    client = _clients.get(settings)
    if client is not None:
        return client
    with _clients_lock:
        client = _clients.get(settings)
        if client is None:
            from ..extras import require

            boto3 = require("s3")
            from botocore.config import Config

            _pid, endpoint, region, profile, _key, _secret, _token, attempts, timeout = settings
            options: dict[str, Any] = {}
            if endpoint:  # S3-compatible stores rarely serve virtual-host-style buckets
                options["s3"] = {"addressing_style": "path"}
            config = Config(retries={"max_attempts": attempts, "mode": "standard"},
                            connect_timeout=timeout, read_timeout=timeout,
                            max_pool_connections=32, **options)
            session = boto3.session.Session(profile_name=profile, region_name=region)
            client = session.client("s3", endpoint_url=endpoint, config=config)
            _clients[settings] = client
            log.debug("Created S3 client (endpoint %s, %d attempts, %.1f s timeout)",
                      endpoint or "AWS", attempts, timeout)
    return client


def _error_text(exc: BaseException) -> str:
    """A short description of a boto3/botocore error (no request signatures or keys)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response["Error"]
        return f"{err.get('Code', '?')}: {err.get('Message', '') or type(exc).__name__}"
    return f"{type(exc).__name__}: {exc}"


def _is_not_found(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("404", "NoSuchKey", "NotFound") or status == 404


class S3FileSystem:
    """Checkpoint files as objects under ``s3://bucket/prefix``; same methods as
    :class:`~.storage.LocalFileSystem`. Every failure raises
    :class:`~airflow_checkpoint_provider.engine.errors.CheckpointStorageError` naming the URI,
    except :meth:`remove_tree` and :meth:`remove_file`, which are best effort like
    ``shutil.rmtree(ignore_errors=True)`` (a cleanup must not fail a job).

    :param multipart_threshold: files of at least this many bytes go up in parts
        (default ``$CKPT_S3_MULTIPART_THRESHOLD`` or 8 MiB).
    :param multipart_chunksize: part size (default ``$CKPT_S3_MULTIPART_CHUNKSIZE`` or 8 MiB,
        never below S3's 5 MiB minimum).
    """

    def __init__(self, *, multipart_threshold: int | None = None,
                 multipart_chunksize: int | None = None) -> None:
        self.multipart_threshold = int(multipart_threshold if multipart_threshold is not None
                                       else S3_MULTIPART_THRESHOLD.get())
        chunk = int(multipart_chunksize if multipart_chunksize is not None
                    else S3_MULTIPART_CHUNKSIZE.get())
        self.multipart_chunksize = max(chunk, MIN_PART_SIZE)

    @property
    def client(self):
        return s3_client()

    # -- files ----------------------------------------------------------------------------
    def write_bytes(self, path: str, data: FileData, *, atomic: bool = False) -> None:
        """Upload ``data`` (one buffer, or the object's pieces in order) to ``path``.
        ``atomic`` is accepted for the common interface: an S3 object appears complete or
        not at all."""
        parts = pieces_of(data)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        bucket, key = split_uri(path)
        if not key:
            raise CheckpointStorageError(f"cannot write checkpoint file {path}: no object key")
        try:
            if len(data) >= self.multipart_threshold:
                from boto3.s3.transfer import TransferConfig

                config = TransferConfig(multipart_threshold=self.multipart_threshold,
                                        multipart_chunksize=self.multipart_chunksize)
                self.client.upload_fileobj(io.BytesIO(data), bucket, key, Config=config)
            else:
                self.client.put_object(Bucket=bucket, Key=key, Body=data)
        except Exception as exc:  # noqa: BLE001 - botocore/s3transfer raise many types
            raise CheckpointStorageError(
                f"cannot write checkpoint file {path} ({len(data)} bytes): {_error_text(exc)}"
            ) from exc

    def read_bytes(self, path: str) -> bytes:
        bucket, key = split_uri(path)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
            return response["Body"].read()
        except Exception as exc:  # noqa: BLE001
            if _is_not_found(exc):
                raise CheckpointStorageError(f"checkpoint file {path} does not exist") from exc
            raise CheckpointStorageError(
                f"cannot read checkpoint file {path}: {_error_text(exc)}") from exc

    def exists(self, path: str) -> bool:
        """True if ``path`` is an object or a prefix with objects below it (a directory)."""
        bucket, key = split_uri(path)
        if key:
            try:
                self.client.head_object(Bucket=bucket, Key=key)
                return True
            except Exception as exc:  # noqa: BLE001
                if not _is_not_found(exc):
                    raise CheckpointStorageError(
                        f"cannot check checkpoint location {path}: {_error_text(exc)}") from exc
        return self.is_dir(path)

    def is_dir(self, path: str) -> bool:
        """True if at least one object lies below the prefix ``path/``."""
        bucket, key = split_uri(path)
        try:
            response = self.client.list_objects_v2(Bucket=bucket, Prefix=_dir_prefix(key),
                                                   MaxKeys=1)
        except Exception as exc:  # noqa: BLE001
            if _is_not_found(exc):  # NoSuchBucket
                return False
            raise CheckpointStorageError(
                f"cannot list checkpoint location {path}: {_error_text(exc)}") from exc
        return response.get("KeyCount", 0) > 0

    def list_files(self, path: str) -> list[str]:
        """Every object below ``path`` as keys relative to it, sorted."""
        bucket, key = split_uri(path)
        prefix = _dir_prefix(key)
        return sorted(k[len(prefix):] for k in self._keys(bucket, prefix, path))

    def remove_file(self, path: str) -> None:
        bucket, key = split_uri(path)
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except Exception as exc:  # noqa: BLE001
            log.warning("Could not delete checkpoint file %s: %s", path, _error_text(exc))

    def remove_tree(self, path: str) -> None:
        """Delete every object below ``path/`` in batches of up to 1000 keys. Best effort:
        failures are logged (the objects stay behind), never raised."""
        bucket, key = split_uri(path)
        try:
            keys = list(self._keys(bucket, _dir_prefix(key), path))
            failed = 0
            for start in range(0, len(keys), DELETE_BATCH):
                batch = keys[start:start + DELETE_BATCH]
                response = self.client.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
                failed += len(response.get("Errors") or [])
            if failed:
                log.warning("Could not delete %d of %d objects under %s", failed, len(keys), path)
        except Exception as exc:  # noqa: BLE001
            log.warning("Could not delete checkpoint location %s: %s", path, exc)

    # -- helpers --------------------------------------------------------------------------
    def _keys(self, bucket: str, prefix: str, path: str):
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            keys = []
            for page in paginator.paginate(Bucket=bucket, Prefix=prefix,
                                           PaginationConfig={"PageSize": LIST_PAGE_SIZE}):
                keys.extend(obj["Key"] for obj in page.get("Contents") or [])
            return keys
        except Exception as exc:  # noqa: BLE001
            if _is_not_found(exc):
                return []
            raise CheckpointStorageError(
                f"cannot list checkpoint location {path}: {_error_text(exc)}") from exc


def _dir_prefix(key: str) -> str:
    """The listing prefix of a "directory" key: ``a/b`` -> ``a/b/``; the bucket root -> ``""``."""
    return f"{key}/" if key else ""
