"""What every cell of the chaos matrix is made of: an :class:`Entry` (how to build its
pipeline, its outputs and reference), the :class:`BuildContext` of one run, an
:class:`Output` to compare, and where the repository and its tests are (the tests' pipeline
modules are importable from here on). :mod:`.catalogue` lists the entries; connector
families with cells of their own (:mod:`.kafka_cells`) build on this module only.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests", "support")  # the tests' helper modules
for _p in (ROOT, TESTS):  # the tests' pipeline modules (slots inherit sys.path)
    if _p not in sys.path:
        sys.path.insert(0, _p)

@dataclass(frozen=True)
class Output:
    """One committed output of a pipeline.

    ``path``: its FileSink directory, relative to the run root. ``kind``: ``append`` (the
    multiset of committed rows), ``upsert`` (the last committed row per ``key``, in commit
    order: update streams, whose intermediate rows depend on batching) or ``changelog``
    (``+I``/``+U`` add a row, ``-U``/``-D`` remove one: the multiset that remains).
    ``columns``: the columns compared (``None``: every column but ``_op``).
    """

    path: str
    kind: str = "append"
    key: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    #: a reduction after ``kind`` (``"q12"``: the per-bidder totals, see compare.py)
    post: str | None = None


@dataclass
class BuildContext:
    """What a run changes in a pipeline: its root, state backend, aligned or unaligned
    checkpoints, the seeded points where an exception is raised (input positions) and the
    directory of their fire-once markers."""

    root: str
    backend: str = "heap"
    unaligned: bool = False
    raise_points: list[int] = field(default_factory=list)
    #: what the harness prepared for the run (CDC: the source database and the target)
    extra: dict = field(default_factory=dict)

    @property
    def faults_dir(self) -> str:
        return os.path.join(self.root, "faults")

    def fault_plan(self):
        """A tests/support/pipelines.FaultPlan of the raise points (``None`` without any)."""
        if not self.raise_points:
            return None
        from pipelines import FaultPlan

        return FaultPlan(self.faults_dir, [("record", p) for p in self.raise_points])


@dataclass(frozen=True)
class Entry:
    name: str
    group: str
    make: Callable[[BuildContext], object]
    outputs: tuple[Output, ...]
    reference: str  # "duckdb" | "failure-free"
    #: input records the raise points are drawn from (ids or source positions)
    records: int
    #: seconds a failure-free run takes on a free core (kills are drawn within ~this)
    seconds: float
    runners: tuple[str, ...] = ("local", "spark")
    xfail: str | None = None
    #: the Nexmark queries of the pipeline (several: they share one source), each compared
    #: with its DuckDB reference (empty: the entry's name)
    queries: tuple[str, ...] = ()


def configure(p, ctx: BuildContext):
    """The run's state backend and checkpoint mode on a built pipeline."""
    p.state_backend = ctx.backend
    p.checkpoint = dataclasses.replace(p.checkpoint, unaligned=ctx.unaligned)
    return p
