"""Where the repository and the test folders are, for tests that read the repository's files
or start processes that import helper modules: a test's depth in tests/ changes when it moves
(tests/README.md), these do not."""

from __future__ import annotations

from pathlib import Path

#: the repository's root (``tests/..``)
REPO_ROOT = Path(__file__).resolve().parents[2]
#: tests/
TESTS_DIR = REPO_ROOT / "tests"
#: tests/support/: the helper modules, on ``sys.path`` of the tests (tests/conftest.py) and of
#: the processes they start
SUPPORT_DIR = TESTS_DIR / "support"
