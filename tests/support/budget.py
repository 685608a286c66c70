"""The size of the long test matrices: ``make test`` runs a bounded version of each; with
``CKPT_TEST_FULL=1`` in the environment the tests run their full matrix (every seed of the
fault-injection suite, the big Hypothesis example counts), as before the suite was trimmed
to stay under 20 minutes (issue 40)."""

from __future__ import annotations

import os

#: run the full matrices (``CKPT_TEST_FULL=1``); the default is the bounded ``make test`` one
FULL = os.environ.get("CKPT_TEST_FULL", "").strip().lower() not in ("", "0", "false", "no")


def scaled(bounded: int, full: int) -> int:
    """``full`` under ``CKPT_TEST_FULL=1``, else ``bounded``."""
    return full if FULL else bounded


#: JVM options of every JVM the tests start (tests/conftest.py puts them in
#: ``JAVA_TOOL_OPTIONS``; the real deployments also write them into their Spark defaults):
#: the C1 compiler only and the serial GC. A test's JVM lives seconds to minutes, so C2's
#: compilations never pay back their CPU on 2 shared cores: a local[2] spark-submit of a
#: small job took 10.4 instead of 16.3 CPU seconds, and
#: tests/integration/engine/operators/test_windows_vs_structured_streaming.py 18 instead of 30.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
