"""The slot's watchdog (runtime/host/slot.py): it ends the process a grace period after the
control connection closed, never while the connection lives or after the slot ended."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from airflow_checkpoint_provider.engine.runtime.host import slot as slot_module
from airflow_checkpoint_provider.engine.runtime.host.slot import Slot, connection_closed


@pytest.fixture
def exits(monkeypatch):
    calls: list[tuple[float, int]] = []
    done = threading.Event()

    def fake_exit(code: int) -> None:
        calls.append((time.monotonic(), code))
        done.set()

    monkeypatch.setattr(slot_module.os, "_exit", fake_exit)
    return calls, done


def _watch(grace: float) -> tuple[Slot, socket.socket, threading.Thread]:
    ours, coordinator = socket.socketpair()
    s = Slot(0, 0, None, orphan_exit=grace)
    t = threading.Thread(target=s._watchdog, args=(ours, grace), daemon=True)
    t.start()
    return s, coordinator, t


@pytest.mark.timeout(30)
def test_a_closed_control_connection_ends_the_process_after_the_grace(exits):
    calls, done = exits
    s, coordinator, t = _watch(0.5)
    coordinator.sendall(b"pending")  # unread data: the connection is alive, no exit
    time.sleep(1.5)
    assert not calls
    closed_at = time.monotonic()
    coordinator.close()
    assert done.wait(10), "the watchdog did not end the process"
    ((at, code),) = calls
    assert code == slot_module.ORPHAN_EXIT_CODE
    assert 0.4 <= at - closed_at < 5.0, at - closed_at


@pytest.mark.timeout(30)
def test_a_slot_that_ended_is_never_ended_by_its_watchdog(exits):
    calls, _ = exits
    s, coordinator, t = _watch(0.5)
    coordinator.close()
    time.sleep(0.1)
    s.released.set()  # the slot returned within the grace (a reused Spark Python worker)
    t.join(5)
    assert not t.is_alive() and not calls
    s2, coordinator2, t2 = _watch(0.2)
    s2.released.set()  # released first, closed later (the normal end of a job)
    coordinator2.close()
    t2.join(5)
    assert not t2.is_alive() and not calls


def test_connection_closed_peeks_without_consuming():
    a, b = socket.socketpair()
    try:
        assert not connection_closed(a)  # nothing pending, open
        b.sendall(b"x")
        assert not connection_closed(a)
        assert a.recv(1) == b"x"  # the peek consumed nothing
        b.close()
        assert connection_closed(a)
    finally:
        a.close()
