import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)  # shared test pipelines (tests/pipelines.py) importable by slots


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A temp dir holding checkpoints, output and the metadata DB of one test."""
    monkeypatch.delenv("CKPT_METADATA_URL", raising=False)
    return tmp_path
