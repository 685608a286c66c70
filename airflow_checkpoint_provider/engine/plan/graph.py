"""Logical JobGraph -> parallel ExecutionGraph.

* A :class:`Node` is one operator of the pipeline; an :class:`Edge` says how records move
  from one node to the next (``forward``, ``hash`` by key group, ``rebalance``,
  ``broadcast``).
* Forward edges between nodes of the same parallelism, where the upstream has no other
  consumer and the downstream no other input, are *chained*: the nodes run in one task and
  records pass by function call. Each chain becomes a :class:`Vertex`.
* Subtask ``i`` of every vertex runs in slot ``i``; the job needs
  ``max(vertex.parallelism)`` slots.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import PipelineDefinitionError
from ..eventtime import TimestampSpec, WatermarkStrategy
from ..names import validate_uid

FORWARD, HASH, REBALANCE, BROADCAST = "forward", "hash", "rebalance", "broadcast"
#: prefix of a chain's derived id (:attr:`Vertex.auto_uid`); no user uid can start with it
AUTO_UID_PREFIX = "~chain-"
#: operators with two inputs (``connect`` and the joins): each input edge says which it is
TWO_INPUT_KINDS = ("co_process", "interval_join", "window_join", "broadcast_process",
                   "temporal_join", "regular_join", "max_by_join", "unique_key_join",
                   "temporal_table_join")
#: operators whose state is keyed (redistributed by key group on restore): the kinds whose
#: operator keeps keyed state in runtime/operators/registry.py (a layout other than NONE).
#: Listed here because plan/ may not import runtime/; tests/unit/engine/runtime/operators/
#: test_registry_kind_lists.py checks that both agree.
KEYED_KINDS = ("process", "reduce", "aggregate", "window_aggregate", "window", "top_n",
               "session_aggregate", "upsert_materializer", "latest_by_key", *TWO_INPUT_KINDS)
STATEFUL_KINDS = ("source", *KEYED_KINDS, "sink")


@dataclass
class Node:
    id: int
    kind: str  # source | map | flat_map | filter | map_batches | process | reduce | sink
    name: str
    uid: str | None
    parallelism: int | None
    payload: object = None  # user function / source / sink
    key_selector: Callable[[dict], object] | None = None  # keyed operators
    #: sources: how the source makes watermarks
    watermarks: WatermarkStrategy | None = None
    #: where a record's event time is, from the sources' watermark strategy; None without one
    timestamp: TimestampSpec | None = None


@dataclass
class Edge:
    source: int
    target: int
    partitioning: str
    key_selector: Callable[[dict], object] | None = None
    #: a side output of the source node (``"late"``: records a window found too late)
    side: str | None = None
    #: two-input targets (:data:`TWO_INPUT_KINDS`): the input this edge feeds, 1 or 2
    input: int | None = None


@dataclass
class JobGraph:
    name: str
    max_parallelism: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)

    def inputs(self, node_id: int) -> list[Edge]:
        return [e for e in self.edges if e.target == node_id]

    def outputs(self, node_id: int) -> list[Edge]:
        return [e for e in self.edges if e.source == node_id]


@dataclass
class InputEdge:
    """An input of a vertex: ``source_vertex`` with ``source_parallelism`` subtasks."""

    source_vertex: int
    source_parallelism: int
    partitioning: str
    #: the input of a two-input operator this edge feeds (1 or 2), else None
    input: int | None = None


@dataclass
class OutputEdge:
    target_vertex: int
    target_parallelism: int
    partitioning: str
    key_selector: Callable[[dict], object] | None = None
    side: str | None = None


@dataclass
class Vertex:
    id: int
    nodes: list[Node]
    parallelism: int
    inputs: list[InputEdge] = field(default_factory=list)
    outputs: list[OutputEdge] = field(default_factory=list)
    #: the chain's id derived from the topology (:func:`_derive_auto_uids`): an unaligned
    #: checkpoint stores the chain's in-flight records under it when no operator of the
    #: chain has a uid and state (a stateless map between two exchanges)
    auto_uid: str = ""

    @property
    def name(self) -> str:
        return " -> ".join(n.name for n in self.nodes)

    @property
    def is_source(self) -> bool:
        return self.nodes[0].kind == "source"

    def num_input_channels(self) -> int:
        return sum(channels_for_input(e, self.parallelism) for e in self.inputs)

    def input_of_channels(self) -> list[int | None]:
        """The input (1 or 2) each input channel feeds, in channel order (the order of
        :func:`~.runtime.host.slot.input_channel_index`); None for a single-input vertex."""
        return [e.input for e in self.inputs
                for _ in range(channels_for_input(e, self.parallelism))]


def channels_for_input(edge: InputEdge, parallelism: int) -> int:
    """Input channels a subtask has for ``edge`` (forward edges connect subtask i to i)."""
    return 1 if edge.partitioning == FORWARD else edge.source_parallelism


@dataclass
class ExecutionGraph:
    job_name: str
    max_parallelism: int
    vertices: list[Vertex]

    @property
    def num_slots(self) -> int:
        return max(v.parallelism for v in self.vertices)

    def vertex(self, vertex_id: int) -> Vertex:
        return self.vertices[vertex_id]

    def tasks(self) -> list[tuple[int, int]]:
        return [(v.id, i) for v in self.vertices for i in range(v.parallelism)]

    def tasks_in_slot(self, slot: int) -> list[tuple[int, int]]:
        return [(v.id, slot) for v in self.vertices if slot < v.parallelism]

    def node_by_uid(self, uid: str) -> tuple[Vertex, Node] | None:
        for v in self.vertices:
            for n in v.nodes:
                if n.uid == uid:
                    return v, n
        return None

    def vertex_by_auto_uid(self, auto_uid: str) -> Vertex | None:
        """The chain whose derived id (:attr:`Vertex.auto_uid`) is ``auto_uid``."""
        return next((v for v in self.vertices if v.auto_uid == auto_uid), None)


def validate(graph: JobGraph) -> None:
    """Reject pipelines whose state could not be restored reliably."""
    seen: dict[str, Node] = {}
    for node in graph.nodes:
        if (node.kind in STATEFUL_KINDS or _checkpointed(node.payload)) and not node.uid:
            raise PipelineDefinitionError(
                f"operator {node.name!r} ({node.kind}) is stateful and needs a stable uid: "
                f"pass uid='...' so its state can be restored after a change"
            )
        if node.uid:
            validate_uid(node.uid)
            if node.uid in seen:
                raise PipelineDefinitionError(
                    f"duplicate operator uid {node.uid!r} (used by {seen[node.uid].name!r} and "
                    f"{node.name!r}); every uid must be unique in a pipeline"
                )
            seen[node.uid] = node
        if node.parallelism is not None and not 1 <= node.parallelism <= graph.max_parallelism:
            raise PipelineDefinitionError(
                f"operator {node.uid or node.name!r}: parallelism {node.parallelism} must be "
                f"between 1 and max_parallelism {graph.max_parallelism}"
            )
    if not any(n.kind == "source" for n in graph.nodes):
        raise PipelineDefinitionError(f"pipeline {graph.name!r} has no source")
    if not any(n.kind == "sink" for n in graph.nodes):
        raise PipelineDefinitionError(f"pipeline {graph.name!r} has no sink")


def _checkpointed(payload: object) -> bool:
    from .functions import CheckpointedFunction

    return isinstance(payload, CheckpointedFunction)


def build_execution_graph(graph: JobGraph) -> ExecutionGraph:
    validate(graph)
    parallelism = _resolve_parallelism(graph)
    edges = [_normalise_edge(e, parallelism) for e in graph.edges]

    def chainable(e: Edge) -> bool:
        return (
            e.partitioning == FORWARD
            and e.side is None
            and parallelism[e.source] == parallelism[e.target]
            and sum(1 for x in edges if x.source == e.source) == 1
            and sum(1 for x in edges if x.target == e.target) == 1
        )

    chain_of: dict[int, int] = {}
    vertices: list[Vertex] = []
    for node in graph.nodes:  # nodes are created in topological order by the API
        inputs = [e for e in edges if e.target == node.id]
        if len(inputs) == 1 and chainable(inputs[0]):
            vertex = vertices[chain_of[inputs[0].source]]
            vertex.nodes.append(node)
        else:
            vertex = Vertex(id=len(vertices), nodes=[node], parallelism=parallelism[node.id])
            vertices.append(vertex)
        chain_of[node.id] = vertex.id
    for e in edges:
        src, dst = chain_of[e.source], chain_of[e.target]
        if src == dst:
            continue
        vertices[src].outputs.append(
            OutputEdge(dst, vertices[dst].parallelism, e.partitioning, e.key_selector, e.side)
        )
        if any(i.source_vertex == src for i in vertices[dst].inputs):
            # channels are addressed by upstream vertex: a second edge could not connect
            raise PipelineDefinitionError(
                f"operator {graph.nodes[e.target].uid or graph.nodes[e.target].name!r} reads "
                f"{vertices[src].name!r} twice (union or connect of a stream with itself); "
                "map() one of the two first")
        vertices[dst].inputs.append(InputEdge(src, vertices[src].parallelism, e.partitioning,
                                              e.input))
    _derive_auto_uids(vertices)
    return ExecutionGraph(graph.name, graph.max_parallelism, vertices)


def _derive_auto_uids(vertices: list[Vertex]) -> None:
    """Give every chain a stable id derived from the topology, as Flink hashes the stream
    graph for operators without a uid: a hash of the chain's operators (kind and uid, else
    name) and of its inputs (their derived ids, partitioning and input number), plus an
    occurrence number for chains that would otherwise be equal. The same pipeline code gives
    the same ids in every process and run; a changed topology upstream gives other ids
    (restoring in-flight records then fails naming the chain, see
    :func:`~.checkpoint.restore.assign_restore`). Vertices are in topological order."""
    seen: dict[str, int] = {}
    for v in vertices:
        shape = [[[n.kind, n.uid or n.name] for n in v.nodes],
                 [[vertices[i.source_vertex].auto_uid, i.partitioning, i.input]
                  for i in v.inputs]]
        digest = hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]
        n = seen[digest] = seen.get(digest, -1) + 1
        if n:
            digest = hashlib.sha256(json.dumps([shape, n]).encode()).hexdigest()[:16]
        v.auto_uid = AUTO_UID_PREFIX + digest


def _resolve_parallelism(graph: JobGraph) -> dict[int, int]:
    result: dict[int, int] = {}
    for node in graph.nodes:
        if node.parallelism is not None:
            result[node.id] = node.parallelism
        else:
            ups = [result[e.source] for e in graph.inputs(node.id)]
            result[node.id] = max(ups) if ups else 1
    return result


def _normalise_edge(edge: Edge, parallelism: dict[int, int]) -> Edge:
    if edge.partitioning == FORWARD and parallelism[edge.source] != parallelism[edge.target]:
        # As in Flink: a forward edge between different parallelisms becomes rebalance.
        return Edge(edge.source, edge.target, REBALANCE, edge.key_selector, edge.side,
                    edge.input)
    return edge
