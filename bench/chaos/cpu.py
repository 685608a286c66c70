"""CPU seconds of a chaos run: every process of its drivers' sessions (the driver, its slot
processes, the Spark JVM and Python workers), sampled from ``/proc`` while they live.

Wall time says little on a machine shared with other work (a run took 37 s or 104 s for the
same seed), and ``getrusage(RUSAGE_CHILDREN)`` misses the slots of a SIGKILLed driver (they
are reparented, never reaped by the harness). Each driver starts its own session
(``start_new_session``), which its descendants keep; the meter keeps the last CPU time seen
of every process in those sessions (a process's CPU after its last sample, at most one
interval, is missed). A sample reads every ``/proc/<pid>/stat``: ~10 ms of CPU.
"""

from __future__ import annotations

import os
import time

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuMeter:
    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.sessions: set[int] = set()
        self.seen: dict[tuple[int, int], int] = {}  # (pid, start time) -> utime + stime ticks
        self._last = 0.0

    def add_session(self, sid: int) -> None:
        self.sessions.add(sid)

    def sample(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.sessions or (not force and now - self._last < self.interval):
            return
        self._last = now
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            # after "(comm)": state ppid pgrp session ... utime(12) stime(13) ... starttime(20)
            if int(fields[3]) in self.sessions:
                self.seen[(int(name), int(fields[19]))] = int(fields[11]) + int(fields[12])

    def seconds(self) -> float:
        return sum(self.seen.values()) / TICKS
