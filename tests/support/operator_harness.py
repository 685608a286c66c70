"""Operators driven directly, outside a job (the join, temporal join and broadcast tests):
the operator of a job graph node opened on a backend, two event-time sources to join, the
steps fed to it. Also what the snapshots of an older state layout need
(tests/support/fixtures/*/make.py, each run once against the commit before a layout change,
and the tests restoring them): only engine APIs those older commits had are used here."""

from __future__ import annotations

import importlib.util
import json
import os

from airflow_checkpoint_provider.engine.plan.functions import RuntimeContext
from airflow_checkpoint_provider.engine.runtime.operators.registry import open_operator
from airflow_checkpoint_provider.engine.state.keygroups import KeyGroupRange, key_group_for

MAXP = 128
BACKENDS = ["heap", "rocksdb"]
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def load_make(fixture: str):
    """The ``make.py`` module of ``tests/support/fixtures/<fixture>``: the same nodes, input
    and driver the fixtures were written with."""
    spec = importlib.util.spec_from_file_location(f"{fixture}_make",
                                                  os.path.join(FIXTURES, fixture, "make.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def open_op(node, backend="heap", key_groups=None, restore=None, subtask=0, parallelism=1):
    """The operator of ``node`` as subtask ``subtask`` of ``parallelism`` on ``backend``
    (``heap``/``rocksdb``), owning ``key_groups`` (default all ``MAXP``), restored from
    ``restore`` (a restore spec) if given."""
    ctx = RuntimeContext(job_id="j" * 8, job_name="t", operator_uid=node.uid,
                         subtask_index=subtask, parallelism=parallelism, attempt=0)
    return open_operator(node, ctx, key_groups or KeyGroupRange(0, MAXP - 1), MAXP,
                         {"kind": backend}, restore)


def steps_for(op, steps: list, key=lambda _input, row: row["k"]) -> list:
    """The script ``steps`` as subtask ``op`` receives them after a rescale: each input step
    (``("in", input, rows)``) keeps the rows of ``op``'s key groups (``key(input, row)``
    gives a row's key); other steps pass unchanged."""
    return [(s[0], s[1], [r for r in s[2] if key_group_for(key(s[1], r), MAXP)
                          in op.backend.key_groups]) if s[0] == "in" else s for s in steps]


def restore_spec(op, directory) -> dict:
    """Snapshot ``op`` (checkpoint 1) into ``directory``: the restore spec :func:`open_op`
    takes (``states``, ``keyed`` handles, ``operator_state``)."""
    snap = op.snapshot(1)
    handles = [snap.keyed.write(str(directory), "op-0", True)[0]] if snap.keyed.write else []
    return {"directory": str(directory), "states": snap.states, "keyed": handles,
            "operator_state": snap.operator_state}


def two_sources(p):
    """Sources ``a`` and ``b`` of ``p`` (one record each; the tests feed the operator
    themselves), event time ``ts`` without disorder."""
    from airflow_checkpoint_provider.engine import GeneratorSource, WatermarkStrategy

    wm = WatermarkStrategy.for_bounded_out_of_orderness(0, timestamp_field="ts")
    return (p.source(GeneratorSource(1), uid="a", watermarks=wm),
            p.source(GeneratorSource(1), uid="b", watermarks=wm))


def run(op, steps) -> list:
    """Feed ``steps`` (``[input, rows]`` or ``["wm", watermark]``); return what it emitted."""
    out = []
    for step in steps:
        if step[0] == "wm":
            for batch in op.on_watermark(step[1]):
                out += batch
        else:
            out += op.process_input(step[0], step[1])
    return out


def write_snapshot(node, backend: str, steps: list, directory: str, extra) -> None:
    """Open the operator, feed ``steps``, snapshot it into ``directory`` with ``spec.json``:
    the restore spec (``states``, ``keyed`` handles, ``operator_state``), the steps
    (``phase1``), what it emitted (``out1``) and ``extra(op)``."""
    op = open_op(node, backend)
    out1 = run(op, steps)
    snap = op.snapshot(1)
    os.makedirs(directory, exist_ok=True)
    handle, _, _ = snap.keyed.write(directory, f"{node.uid}-0", True)
    spec = {"states": snap.states, "keyed": [handle], "operator_state": snap.operator_state,
            "phase1": steps, "out1": out1, **extra(op)}
    op.close()
    with open(os.path.join(directory, "spec.json"), "w") as f:
        json.dump(spec, f, indent=1, sort_keys=True)
