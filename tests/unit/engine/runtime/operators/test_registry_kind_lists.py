"""The kind lists kept outside the operator registry agree with it (issue 53 item 1):
plan/ may not import runtime/, so plan.graph.KEYED_KINDS is a list of its own, and the
state reader's COLUMNAR_KINDS names what it reads of the registry's columnar operators."""

from __future__ import annotations

from airflow_checkpoint_provider.engine.plan import graph
from airflow_checkpoint_provider.engine.runtime.operators import registry
from airflow_checkpoint_provider.engine.runtime.operators.registry import StateLayout
from airflow_checkpoint_provider.engine.state_io.read import COLUMNAR_KINDS


def test_the_keyed_kinds_of_the_plan_are_the_registrys_keyed_operators():
    keyed = {e.kind for e in registry.ENTRIES if e.layout is not StateLayout.NONE}
    assert set(graph.KEYED_KINDS) == keyed
    assert len(graph.KEYED_KINDS) == len(set(graph.KEYED_KINDS))
    assert set(graph.STATEFUL_KINDS) == keyed | {"source", "sink"}


def test_the_two_input_kinds_are_registered_keyed_operators():
    keyed = {e.kind for e in registry.ENTRIES if e.layout is not StateLayout.NONE}
    assert set(graph.TWO_INPUT_KINDS) <= keyed


def test_every_columnar_state_kind_the_reader_reads_belongs_to_a_columnar_operator():
    columnar = [e for e in registry.ENTRIES if e.layout is StateLayout.COLUMNAR]
    names = {e.kind for e in columnar} | {n for e in columnar for n in e.states}
    assert set(COLUMNAR_KINDS) <= names, set(COLUMNAR_KINDS) - names

