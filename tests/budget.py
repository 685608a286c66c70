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
