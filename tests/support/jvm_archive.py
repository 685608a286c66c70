"""Class-data sharing (CDS) for the Spark JVMs the tests start.

Each test JVM (local-mode drivers, spark-submit jobs, the standalone cluster's daemons and
executors) spends seconds of CPU loading and verifying the same Spark, Scala and Netty
classes from ~280 jars. Java 17 can write the classes a JVM loaded into a dynamic archive
(``-XX:ArchiveClassesAtExit``) that later JVMs map instead (``-XX:SharedArchiveFile``):
measured here, a local[2] session with two small queries took 5.5 instead of 10 CPU-s.

The controller of a test session builds the archive in a background process at the start
(one small Spark job, ~30 CPU-s, once per machine: the file is keyed by the JDK, pyspark's
jars and the JVM options, under the temp dir). Every test process names the archive in
``JAVA_TOOL_OPTIONS`` when it starts (:func:`use_archive`); until the build is done, that path links to
the JDK's own class archive, so JVMs started before map what they would have mapped anyway
(a JVM named an archive that does not exist maps none at all). A JVM whose class path does
not start like the one recorded (a deployment with its own ``SPARK_CONF_DIR``) ignores the
archive silently and loads its classes as before.

A session that ends first stops the build (a run of a few tests); ``python
tests/support/jvm_archive.py`` builds the archive in the foreground.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

from budget import TEST_JVM_OPTIONS

#: archives older than this with another key (an older pyspark or JDK) are removed
_STALE_S = 24 * 3600


def _java() -> str | None:
    java = shutil.which("java")
    return None if java is None else os.path.realpath(java)


def _key() -> str | None:
    java = _java()
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    parts = [java, str(os.stat(java).st_mtime_ns), jars, pyspark.__version__,
             TEST_JVM_OPTIONS, str(os.getuid())]
    parts += sorted(f"{e.name}:{st.st_size}:{st.st_mtime_ns}"
                    for e in os.scandir(jars) for st in (e.stat(),))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@functools.cache
def archive_path() -> str | None:
    """Where this machine's archive is (or will be); None without Java or pyspark."""
    key = _key()
    if key is None:
        return None
    return os.path.join(tempfile.gettempdir(), f"ckpt-test-jvm-{os.getuid()}", f"spark-{key}.jsa")


def built(path: str) -> bool:
    """Whether ``path`` holds the built archive (not the link to the JDK's, not nothing)."""
    return os.path.exists(path) and not os.path.islink(path)


def _jdk_archive() -> str | None:
    """The JDK's own class archive (what a JVM maps when no archive is named)."""
    java = _java()
    if java is None:
        return None
    path = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "server", "classes.jsa")
    return path if os.path.exists(path) else None


def link_jdk_archive(path: str) -> bool:
    """Make ``path`` a link to the JDK's archive unless something is there; False without
    a JDK archive."""
    jdk = _jdk_archive()
    if jdk is None:
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.lexists(path):
        placeholder = f"{path}.{os.getpid()}.link"
        os.symlink(jdk, placeholder)
        os.replace(placeholder, path)
    return True


def start_build() -> subprocess.Popen | None:
    """Build the archive in a background process unless it is built; the caller stops the
    returned process (by its PID) if the session ends first.

    Until the build replaces it, the archive's path is a link to the JDK's own archive: a
    JVM named an archive that does not exist maps none, not even the JDK's."""
    path = archive_path()
    if path is None or built(path):
        return None
    if os.environ.get("JAVA_TOOL_OPTIONS") != TEST_JVM_OPTIONS:
        return None  # JVM options set by hand: the archive would not be named (use_archive)
    if not link_jdk_archive(path):
        return None
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_build(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, 9)  # its own session: the build's JVM with it
        proc.wait()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{archive_path()}.{proc.pid}.partial")


def use_archive() -> None:
    """Name the archive in ``JAVA_TOOL_OPTIONS`` if its path exists (built, or the link that
    :func:`start_build` made before the test processes start) and the tests' own JVM options
    are in force (a value set by hand, e.g. to profile a JVM, is left alone)."""
    if os.environ.get("JAVA_TOOL_OPTIONS") != TEST_JVM_OPTIONS:
        return
    path = archive_path()
    if path is not None and os.path.exists(path):
        os.environ["JAVA_TOOL_OPTIONS"] = f"{TEST_JVM_OPTIONS} -XX:SharedArchiveFile={path}"


def _workload() -> None:
    """The classes most test JVMs load: SQL with a join and an aggregation, a Python
    barrier stage (the Spark runner's slots), a Structured Streaming query."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("jvm-archive")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    try:
        left = spark.range(1000).selectExpr("id % 10 AS k", "id AS v")
        right = spark.createDataFrame([(i, str(i)) for i in range(10)], ["k", "name"])
        left.join(right, "k").groupBy("name").agg({"v": "sum"}).collect()
        sc = spark.sparkContext
        sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: [sum(it)]).collect()
        query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
                 .groupBy().count().writeStream.outputMode("complete").format("memory")
                 .queryName("jvm_archive").start())
        deadline = time.monotonic() + 60
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.5)
        query.stop()
    finally:
        gateway = spark.sparkContext._gateway
        spark.stop()
        proc = gateway.proc
        proc.stdin.close()  # the gateway JVM exits on EOF and writes the archive then
        proc.wait(timeout=300)


def _build(path: str) -> None:
    lock = open(f"{path}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another session builds it
    if built(path):
        return  # built while this one started
    for old in glob.glob(os.path.join(os.path.dirname(path), "spark-*")):
        if old.startswith(path):
            if old.endswith(".partial"):
                os.unlink(old)  # a killed build's of this archive (this one holds its lock)
        elif time.time() - os.lstat(old).st_mtime > _STALE_S:
            os.unlink(old)  # another JDK's or pyspark's
    partial = f"{path}.{os.getpid()}.partial"
    os.environ["JAVA_TOOL_OPTIONS"] = f"{TEST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        _workload()
        if os.path.exists(partial):
            os.replace(partial, path)  # whole or nothing: a truncated archive crashes a JVM
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


if __name__ == "__main__":
    _build(sys.argv[1] if len(sys.argv) > 1 else archive_path())
