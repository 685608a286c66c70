"""``module:function`` references to test pipelines, for CLI tests."""

import tempfile

from pipelines import versioned_pipeline


def v1():
    return versioned_pipeline(tempfile.mkdtemp(prefix="ckpt-ref-"), "v1")
