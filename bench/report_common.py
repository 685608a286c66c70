"""What every BENCHMARKS.md section renderer shares: the results directory, number
formatting and Markdown tables."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys

#: the 1-minute load average when this process started (a bench script's start)
START_LOAD = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _machine() -> dict:
    m: dict = {"cores": os.cpu_count(), "memory_gib": None, "cpu_model": None,
               "system": f"{platform.system()} {platform.machine()}",
               "python": platform.python_version()}
    try:
        with open("/proc/meminfo") as f:
            m["memory_gib"] = round(int(f.readline().split()[1]) / 1024 / 1024)
        with open("/proc/cpuinfo") as f:
            m["cpu_model"] = next((line.split(":", 1)[1].strip() for line in f
                                   if line.startswith("model name")), None)
    except OSError:
        pass
    for mod in ("pyspark", "pyarrow"):
        try:
            m[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return m


def record_conditions(directory: str, name: str, command: str | None = None) -> None:
    """Stamp result file ``name`` in ``directory``/conditions.json: today's date (UTC), the
    highest 1-minute load average of this run's start and end, the command and the machine.
    bench/write_benchmarks.py puts them into BENCHMARKS.md (its date, machine and load
    column). Called wherever a bench script writes its results."""
    path = os.path.join(directory, "conditions.json")
    doc: dict = {"files": {}}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    loads = [x for x in (START_LOAD, os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
             if x is not None]
    machine = {**doc.get("machine", {}), **{k: v for k, v in _machine().items() if v}}
    doc["machine"] = machine
    doc.setdefault("files", {})[name] = {
        "measured_on": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "load_1m": round(max(loads), 1) if loads else None,
        "how": "recorded by the bench script (1-minute load average, highest of start and end)",
        "command": command or " ".join(["bench/" + os.path.basename(sys.argv[0]), *sys.argv[1:]]),
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


class Results:
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def load(self, name: str):
        path = os.path.join(self.directory, name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)


def fmt(value, spec=",.0f", unit=""):
    return "n/a" if value is None else f"{value:{spec}}{unit}"

def table(header: list[str], rows) -> list[str]:
    """A Markdown table: the header, its separator, then one line per row of cells."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]
