"""What every BENCHMARKS.md section renderer shares: the results directory, number
formatting and Markdown tables."""

from __future__ import annotations

import json
import os


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
