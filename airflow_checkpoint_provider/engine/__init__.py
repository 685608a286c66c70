"""The embedded barrier/snapshot engine. Never imports Airflow.

Public API::

    from airflow_checkpoint_provider.engine import (
        Pipeline, CheckpointConfig, RestartStrategy, KeyedProcessFunction,
        GeneratorSource, FileSource, FileSink, DiscardSink, read_committed,
        WatermarkStrategy, TumblingWindows, SlidingWindows,
        KeyedCoProcessFunction, ProcessJoinFunction, KeyedBroadcastProcessFunction)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .config import CheckpointConfig, CheckpointingMode, RestartStrategy
from .connectors.base import Sink, SinkWriter, Source, SourceContext, SplitReader
from .connectors.discard import DiscardSink, DiscardWriter
from .connectors.files.committed import CommittedFile, committed_files
from .connectors.files.sink import FileSink, read_committed
from .connectors.generator import GeneratorSource, StridedSplitReader
from .datastream.api import DataStream, JobResult, KeyedStream, Pipeline, WindowedStream
from .datastream.broadcast import BroadcastConnectedStream, BroadcastStream
from .datastream.joins import ConnectedStreams, IntervalJoin, JoinedStreams
from .datastream.temporal import TemporalJoin
from .errors import (
    BadRecordError,
    CheckpointDeclined,
    ConfigurationError,
    CorruptCheckpointError,
    DeterministicError,
    EngineError,
    InvalidNameError,
    JobFailedError,
    JobIdInUseError,
    JobNameInUseError,
    PipelineDefinitionError,
    RestoreError,
    StateMigrationError,
    UntrustedSnapshotError,
)
from .eventtime import SessionWindows, SlidingWindows, TumblingWindows, WatermarkStrategy
from .extras import alias_moved_modules
from .plan.functions import (
    BroadcastContext,
    CheckpointedFunction,
    FunctionStateContext,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessJoinFunction,
    ProcessWindowFunction,
    RuntimeContext,
    Window,
)
from .plan.specs import merge_rows
from .serialization import Serializer
from .state.descriptors import (
    EntryMapStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

#: engine modules that moved into the package of their role (issue 53: no package holds more
#: than 15 modules): their old paths import the same module objects, with a
#: DeprecationWarning naming the new path
_MOVED = {
    "private": "fs.private",
    "sink_names": "connectors.sink_names",
    "metrics": "runners.jobmaster.metrics",
}
alias_moved_modules(__name__, _MOVED)

if TYPE_CHECKING:  # for type checkers and the API reference; loaded lazily below
    from .connectors.files.source import FileSource


def __getattr__(name: str):
    if name == "FileSource":  # optional import: pyarrow.parquet is loaded lazily
        from .connectors.files.source import FileSource

        return FileSource
    raise AttributeError(name)


__all__ = [
    "CheckpointConfig", "CheckpointDeclined", "CheckpointingMode", "ConfigurationError",
    "InvalidNameError", "JobIdInUseError", "JobNameInUseError", "BadRecordError", "DeterministicError",
    "CorruptCheckpointError", "DataStream", "DiscardSink", "EngineError", "FileSink", "FileSource",
    "GeneratorSource", "JobFailedError", "JobResult", "KeyedProcessFunction", "KeyedStream",
    "ListStateDescriptor", "MapStateDescriptor", "Pipeline", "PipelineDefinitionError",
    "ReducingStateDescriptor", "RestartStrategy", "RestoreError", "RuntimeContext", "Serializer",
    "Sink", "SinkWriter", "Source", "SourceContext", "SplitReader", "StateMigrationError",
    "ValueStateDescriptor", "read_committed", "SlidingWindows", "TumblingWindows",
    "WatermarkStrategy", "WindowedStream", "ProcessWindowFunction", "Window",
    "SessionWindows", "CheckpointedFunction", "FunctionStateContext", "UntrustedSnapshotError",
    "ConnectedStreams", "IntervalJoin", "JoinedStreams", "KeyedCoProcessFunction",
    "ProcessJoinFunction", "merge_rows", "BroadcastConnectedStream", "BroadcastContext",
    "BroadcastStream", "KeyedBroadcastProcessFunction", "TemporalJoin",
    # building blocks of user connectors and state (bench/ uses them, issue 53)
    "DiscardWriter", "StridedSplitReader", "EntryMapStateDescriptor",
    # a FileSink's committed part files, in commit order
    "CommittedFile", "committed_files",
]
