"""The state package's layout (issue 53): the columnar modules moved into ``state/columnar``
and their old paths still import, as the same module objects, with a deprecation warning."""

from __future__ import annotations

import importlib
import sys

import pytest

OLD = ["key_index", "distinct_state", "session_state", "topn_state", "topn_snapshot", "windows",
       "join_buffers"]
STATE = "airflow_checkpoint_provider.engine.state"


@pytest.mark.parametrize("name", OLD)
def test_an_old_module_path_imports_the_moved_module_with_a_deprecation_warning(name):
    new = importlib.import_module(f"{STATE}.columnar.{name}")
    sys.modules.pop(f"{STATE}.{name}", None)
    with pytest.warns(DeprecationWarning, match=f"import from {STATE}.columnar.{name}"):
        old = importlib.import_module(f"{STATE}.{name}")
    assert old is new


def test_a_name_of_the_old_columnar_module_still_reads_with_a_deprecation_warning():
    from airflow_checkpoint_provider.engine.state import columnar
    from airflow_checkpoint_provider.engine.state.columnar.key_index import KeyIndex

    assert columnar.AggregateTable is columnar.aggregates.AggregateTable
    with pytest.warns(DeprecationWarning, match="columnar.aggregates"):
        assert columnar.KeyIndex is KeyIndex
    with pytest.raises(AttributeError):
        columnar.no_such_name  # noqa: B018


def test_the_heap_package_keeps_the_names_of_the_heap_module():
    from airflow_checkpoint_provider.engine.state import heap

    for name in ("HeapKeyedStateBackend", "HeapCapture", "ValueState", "ListState",
                 "MapState", "ReducingState", "decode_chunk"):
        assert hasattr(heap, name), name
