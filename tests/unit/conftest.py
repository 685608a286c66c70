"""A unit test runs in-process (tests/README.md): one that starts a subprocess, forks, or
listens on a socket (a server, a job's coordinator or slots) fails, naming what it did; it
belongs in tests/integration/. Only the test's own thread is watched (an integration test of
the same xdist worker may leave threads running)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent

#: the thread of the unit test that runs, None between unit tests
_TEST_THREAD: list[int | None] = [None]


class NotAUnitTest(RuntimeError):
    """What a test of tests/unit must not do."""


def _forbid(what: str) -> None:
    if _TEST_THREAD[0] is not None and threading.get_ident() == _TEST_THREAD[0]:
        raise NotAUnitTest(f"a unit test must not {what}: move it to tests/integration/")


def _guard_popen(original):
    def __init__(self, args, *rest, **kwargs):
        # platform.architecture() asks `file` once per process, whichever test calls it first
        if not (isinstance(args, (list, tuple)) and list(args[:2]) == ["file", "-b"]):
            _forbid(f"start a subprocess ({str(args)[:100]})")
        original(self, args, *rest, **kwargs)
    return __init__


def _guard(original, what: str):
    def guarded(*args, **kwargs):
        _forbid(what)
        return original(*args, **kwargs)
    return guarded


subprocess.Popen.__init__ = _guard_popen(subprocess.Popen.__init__)  # type: ignore[method-assign]
socket.socket.listen = _guard(socket.socket.listen, "listen on a socket")  # type: ignore[method-assign]
for _name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
    if hasattr(os, _name):
        setattr(os, _name, _guard(getattr(os, _name), f"call os.{_name}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # a hook of every conftest sees every item: watch the tests of this folder only
    if UNIT in Path(item.path).resolve().parents:
        _TEST_THREAD[0] = threading.get_ident()
    try:
        yield
    finally:
        _TEST_THREAD[0] = None
