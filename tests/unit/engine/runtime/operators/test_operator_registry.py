"""The operator registry (issue 53 item 1): one entry per operator declaring its spec type,
its state layout and the state names it owns; restore compatibility is decided from those
declarations, and the operator modules' old paths still import."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from airflow_checkpoint_provider.engine.errors import RestoreError
from airflow_checkpoint_provider.engine.plan.graph import KEYED_KINDS, STATEFUL_KINDS, Node
from airflow_checkpoint_provider.engine.plan.specs import IntervalJoinSpec
from airflow_checkpoint_provider.engine.runtime.operators import registry
from airflow_checkpoint_provider.engine.runtime.operators.joins.per_record import (
    IntervalJoinOperator,
)
from airflow_checkpoint_provider.engine.runtime.operators.joins.vectorized import (
    VectorIntervalJoinOperator,
)
from airflow_checkpoint_provider.engine.runtime.operators.registry import StateLayout

SIMPLE_KINDS = ("map", "flat_map", "filter", "map_batches")


def _interval_spec(vectorized: bool) -> IntervalJoinSpec:
    return IntervalJoinSpec(None, (str, str), (None, None), 0, 10, vectorized=vectorized)


def _node(kind: str, payload: object, uid: str = "op") -> Node:
    return Node(0, kind, kind, uid, 1, payload, None)


def test_every_node_kind_of_the_plan_has_an_operator():
    assert set(KEYED_KINDS) | set(STATEFUL_KINDS) | set(SIMPLE_KINDS) == registry.kinds()


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.operator.__name__)
def test_an_entrys_layout_is_the_one_its_operator_keeps(entry):
    assert entry.operator.columnar == (entry.layout is StateLayout.COLUMNAR)
    assert entry.operator.keyed == (entry.layout is not StateLayout.NONE)


def test_no_state_name_has_two_owners():
    names = [n for e in registry.ENTRIES for n in e.states]
    assert len(names) == len(set(names))
    assert registry.owner_of("max-by-join.vectorized").kind == "max_by_join"
    assert registry.owner_of("a user's state") is None


def test_a_kind_with_two_operators_is_picked_by_its_spec():
    assert registry.entry_for(_node("interval_join", _interval_spec(True))).operator is (
        VectorIntervalJoinOperator)
    assert registry.entry_for(_node("interval_join", _interval_spec(False))).operator is (
        IntervalJoinOperator)


def test_a_node_whose_spec_is_not_the_declared_type_is_refused():
    with pytest.raises(TypeError, match="takes a IntervalJoinSpec"):
        registry.create_operator(_node("interval_join", object()), None, None, 128)
    with pytest.raises(ValueError, match="no operator runs node kind 'teleport'"):
        registry.entry_for(_node("teleport", None))


def test_columnar_state_into_a_per_record_operator_is_refused_by_its_owner():
    node = _node("interval_join", _interval_spec(False), uid="ij")
    entry = registry.entry_for(node)
    registry.check_restore(node, entry, {"states": {}}, {"entries"})  # same layout
    registry.check_restore(node, entry, {"states": {}}, set())  # no keyed state
    with pytest.raises(RestoreError, match=r"'ij'.*holds vectorized join state.*"
                                           r"keep vectorized= as it was"):
        registry.check_restore(node, entry, {"states": {}}, {"arrow"})
    spec = {"states": {"max-by-join.vectorized": {}}}
    with pytest.raises(RestoreError, match=r"vectorized \(max-by-join.vectorized\)"):
        registry.check_restore(node, entry, spec, {"arrow"})


def test_per_record_state_into_a_vectorized_op_is_refused():
    from airflow_checkpoint_provider.engine.plan.vectorized_specs import LatestSpec

    node = _node("latest_by_key", LatestSpec("k", "t"), uid="lt")
    entry = registry.entry_for(node)
    with pytest.raises(RestoreError, match=r"'lt'.*per-record.*latest_by_key\(\).*new uid"):
        registry.check_restore(node, entry, {"states": {}}, {"entries"})


@pytest.mark.parametrize(("old", "new", "name"), [
    ("join_state", "operators.joins.state", "COUNT"),
    ("vectorized_ops.latest", "operators.vectorized.latest", "LatestOperator"),
    ("edge_operators", "operators.edges", "SinkOperator"),
    ("factory", "operators.registry", "create_operator"),
    ("mailbox", "task.mailbox", "Mailbox"),
    ("task_checkpoint", "task.checkpointing", "channel_holder"),
    ("slot", "host.slot", "Slot"),
    ("forkserver", "host.forkserver", "ForkServer"),
    ("auth", "host.auth", "accept_peer"),
    ("channels", "host.channels", "RecordWriter"),
    ("environment", "task.environment", "TaskEnvironment"),
    ("failure_place", "task.failure_place", "place_of"),
])
def test_an_old_operator_module_path_imports_the_same_module_with_a_warning(old, new, name):
    base = "airflow_checkpoint_provider.engine.runtime"
    if "." in old:  # the old parent package imported first (it warns on its own)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            importlib.import_module(f"{base}.{old.rpartition('.')[0]}")
    sys.modules.pop(f"{base}.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"import from {base}.{new}"):
        module = importlib.import_module(f"{base}.{old}")
    assert module is importlib.import_module(f"{base}.{new}")
    assert hasattr(module, name)


def test_the_old_operators_module_names_read_from_the_package_with_a_warning():
    from airflow_checkpoint_provider.engine.runtime import operators
    from airflow_checkpoint_provider.engine.runtime.operators.base import MapOperator

    operators.__dict__.pop("MapOperator", None)
    with pytest.warns(DeprecationWarning, match="import MapOperator from .*operators.base"):
        assert operators.MapOperator is MapOperator
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            operators.NoSuchOperator  # noqa: B018


@pytest.mark.parametrize(("name", "new"), [("StreamTask", "task.stream_task"),
                                           ("open_operator", "operators.registry"),
                                           ("LocalChannel", "host.channels"),
                                           ("TaskEnvironment", "task.environment")])
def test_the_old_task_module_names_read_from_the_task_package_with_a_warning(name, new):
    from airflow_checkpoint_provider.engine.runtime import task

    task.__dict__.pop(name, None)
    base = "airflow_checkpoint_provider.engine.runtime"
    with pytest.warns(DeprecationWarning, match=f"import {name} from {base}.{new}"):
        value = getattr(task, name)
    assert value is getattr(importlib.import_module(f"{base}.{new}"), name)


def test_no_engine_module_imports_a_deprecated_runtime_path():
    """The old paths are for users: the engine itself imports the modules where they are."""
    import ast
    from pathlib import Path

    from airflow_checkpoint_provider.engine.runtime import MOVED

    engine = Path(importlib.import_module("airflow_checkpoint_provider.engine").__file__).parent
    moved = tuple(f"runtime.{name}" for name in MOVED)
    # the old runtime.task and runtime.operators modules are packages now: only their
    # submodules may be imported from them
    packages = {"runtime.task": {"stream_task", "checkpointing", "mailbox", "alignment",
                                 "debloat", "outputs"},
                "runtime.operators": {"base", "registry", "edges", "joins", "vectorized"}}
    found = []
    for path in engine.rglob("*.py"):
        package = path.parent.relative_to(engine).parts
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            parts = [*package[:len(package) - node.level + 1], *(node.module or "").split(".")]
            target = ".".join(p for p in parts if p)
            names = {a.name for a in node.names}
            if (target in moved or target.startswith(tuple(m + "." for m in moved))
                    or not names <= packages.get(target, names)):
                found.append(f"{path.relative_to(engine)}:{node.lineno} from {target} "
                             f"import {', '.join(sorted(names))}")
    assert not found, found
