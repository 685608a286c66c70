"""The tests' class archive for Spark JVMs (tests/support/jvm_archive.py): a JVM named it maps it,
before the build (the JDK's own archive) and after (Spark's classes on top)."""

from __future__ import annotations

import os
import subprocess

import jvm_archive
import pytest

pytestmark = pytest.mark.timeout(120)


#: -Xshare:on: a JVM that cannot map the archive fails instead of running without it
_MAP_OR_FAIL = f"-Xshare:on {jvm_archive.TEST_JVM_OPTIONS}"
_ENV = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}


def test_before_its_build_the_archive_path_maps_the_jdks_own_archive(tmp_path):
    path = str(tmp_path / "spark-test.jsa")
    assert jvm_archive.link_jdk_archive(path)
    assert os.path.islink(path)
    done = subprocess.run(["java", *_MAP_OR_FAIL.split(), f"-XX:SharedArchiveFile={path}",
                           "-version"], env=_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "sharing" in done.stderr


def test_the_built_archive_matches_the_class_path_of_a_spark_jvm():
    path = jvm_archive.archive_path()
    if path is None or not jvm_archive.built(path):
        pytest.skip("the Spark class archive is not built yet (python tests/support/jvm_archive.py)")
    import pyspark

    # a driver JVM as spark-submit launches it (the class path it builds, conf dir first)
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    done = subprocess.run([submit, "--driver-java-options",
                           f"{_MAP_OR_FAIL} -XX:SharedArchiveFile={path}", "--version"],
                          env=_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
