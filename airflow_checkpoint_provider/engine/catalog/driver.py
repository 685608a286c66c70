"""Which process drives a job, and whether that process is provably gone.

A job's row names its driver: the host (``socket.gethostname()``) and the process as
``pid:start:boot`` -- the pid, the process's start time in clock ticks since boot (field 22
of ``/proc/<pid>/stat``) and the kernel's boot id. On the same host, a driver is provably
gone when the boot id differs (the host rebooted), no process has that pid, or the process
with that pid started at another time (the pid was reused). Anywhere else -- another host,
no ``/proc`` -- nothing is provable and the heartbeat timeout decides (a lease), as before.

This lets a restart after a driver crash take the job's name at once instead of waiting a
heartbeat timeout (Flink's HA uses a lease as well; a restart on the same host can see that
the process is gone).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (after the parenthesised command name, which may hold
    spaces), or ``None`` if there is no such process (or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    try:
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class DriverProcess:
    host: str
    process: str  # "pid:start:boot"

    @classmethod
    def current(cls) -> DriverProcess:
        return this_process()

    def is_gone(self) -> bool:
        """Whether this driver is provably not running (see the module docstring)."""
        if not self.host or self.host != socket.gethostname():
            return False
        try:
            pid_text, start_text, boot = self.process.split(":", 2)
            pid, start = int(pid_text), int(start_text)
        except ValueError:
            return False
        current_boot = _boot_id()
        if not boot or not current_boot:
            return False
        if boot != current_boot:
            return True
        now = _start_ticks(pid)
        return now is None or now != start


def this_process() -> DriverProcess:
    """This process as a job's driver."""
    start = _start_ticks(os.getpid())
    boot = _boot_id()
    process = f"{os.getpid()}:{start}:{boot}" if start is not None and boot else ""
    return DriverProcess(socket.gethostname(), process)


def driver_is_gone(host: str | None, process: str | None) -> bool:
    """Whether the driver recorded in a job's row is provably gone."""
    return bool(host and process) and DriverProcess(str(host), str(process)).is_gone()
