"""Ship a job's Python code to Spark executors that do not have it installed.

PySpark's own mechanism: zip archives on the executors' ``PYTHONPATH`` through
``spark-submit --py-files`` (``spark.submit.pyFiles``). :func:`code_archives` builds two:

* the engine (this package, pure Python; its third-party dependencies --
  :data:`EXECUTOR_REQUIREMENTS`, and rocksdict/boto3 when used -- must be installed in the
  executors' Python, chosen with ``spark.pyspark.python``);
* the top-level package (or single module) of the user's pipeline reference
  ``module:function``, when it is not part of this package.

Archives are content-addressed (``<name>-<sha256 prefix>.zip``) in a private cache
directory (``0700``, owned by this user; default ``checkpoint-code`` in this user's private temp base), so a
resubmission with unchanged code reuses the same file -- after checking its full SHA-256,
since the executors import whatever it holds. ``CKPT_SHIP_CODE=1`` in the driver's
environment tells the Spark runner not to point executors at the driver's interpreter and
``sys.path`` (see :func:`~.runners.spark.session.session_for`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import stat
import zipfile

from .errors import ConfigurationError
from .fs.private import private_dir, user_temp_dir, write_private
from .settings import SHIP_CODE

#: Set in the driver's environment when the code reaches executors as archives.
SHIP_CODE_ENV = SHIP_CODE.name
_PACKAGE = __name__.split(".")[0]
_SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache"}

#: distributions the engine imports on every executor (``--py-files`` ships the engine, not
#: these); the job's connectors may need more (rocksdict for RocksDB state, boto3 for S3)
EXECUTOR_REQUIREMENTS = ("cloudpickle", "msgpack", "msgspec", "mmh3", "numpy", "pyarrow")


def _zip_tree(root: str, arc_root: str) -> bytes:
    """A deterministic zip of ``root`` (a package dir or one module file) under ``arc_root``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if os.path.isfile(root):
            files = [(root, arc_root)]
        else:
            files = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
                for name in sorted(filenames):
                    if name.endswith((".pyc", ".pyo")):
                        continue
                    path = os.path.join(dirpath, name)
                    files.append((path, os.path.join(arc_root, os.path.relpath(path, root))))
        for path, arcname in files:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(path, "rb") as f:
                zf.writestr(info, f.read())
    return buf.getvalue()


def _write_archive(data: bytes, name: str, cache_dir: str) -> str:
    """``<cache_dir>/<name>-<sha256 prefix>.zip`` holding exactly ``data``.

    The cache directory must be private (:func:`~.private.private_dir`: created ``0700``,
    else owned by this user and writable by nobody else); an existing archive is reused
    only if it is a regular file of this user whose full SHA-256 is that of ``data``,
    else it is rewritten (atomically: a reader never sees a partial archive)."""
    private_dir(cache_dir, "code archive directory")
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(cache_dir, f"{name}-{digest[:16]}.zip")
    if not _is_intact(path, digest):
        write_private(path, data)
    return path


def _is_intact(path: str, digest: str) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        if stat.S_ISDIR(st.st_mode):
            raise ConfigurationError(f"code archive {path} is a directory: remove it")
        os.unlink(path)  # a symlink or another user's file: never reused
        return False
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest() == digest


def _source_of(top_level: str) -> tuple[str, str]:
    """``(path, arcname)`` of an importable top-level package directory or module file."""
    spec = importlib.util.find_spec(top_level)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        raise ConfigurationError(f"cannot ship module {top_level!r} to the executors: it is not "
                                 "importable here (check the pipeline reference and PYTHONPATH)")
    if spec.submodule_search_locations:  # a package
        return list(spec.submodule_search_locations)[0], top_level
    return spec.origin, os.path.basename(spec.origin)


def code_archives(pipeline_ref: str, cache_dir: str | None = None) -> list[str]:
    """Zip archives holding the engine and the pipeline's code, for ``--py-files``.

    ``cache_dir`` defaults to ``checkpoint-code`` in this user's private temp base
    (:func:`~.private.user_temp_dir`)."""
    cache_dir = cache_dir or user_temp_dir("checkpoint-code")
    module = pipeline_ref.split(":", 1)[0]
    tops = [_PACKAGE]
    if module.split(".")[0] != _PACKAGE:
        tops.append(module.split(".")[0])
    archives = []
    for top in tops:
        path, arcname = _source_of(top)
        archives.append(_write_archive(_zip_tree(path, arcname), top, cache_dir))
    return archives
