"""The pipelines of the chaos matrix, each built by an existing builder (bench/nexmark's
queries over its generator; tests/*_pipelines.py for the joins, windows, top-N, count
distinct), so that a cell tests the pipeline the rest of the project tests.

An :class:`Entry` says how to build its pipeline under a run's root directory (``make``),
where its committed output is and how to compare it (:class:`Output`), which reference it
is compared with (``"duckdb"``: :mod:`.reference_duckdb`; ``"failure-free"``: the same
pipeline run once without faults) and how long a failure-free run takes (the window the
seeded kills are drawn from).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .cells import ROOT, TESTS, BuildContext, Entry, Output, configure  # noqa: F401 (re-exported)
from .kafka_cells import KAFKA_ENTRIES

#: Nexmark events per run, their event-time rate (2 ms apart: every timestamp distinct, so
#: "the earliest bid" is never a tie) and the wall-clock rate of the source
NEXMARK_EVENTS = 20_000
NEXMARK_EVENT_RATE = 500
NEXMARK_WALL_RATE = 2_500
NEXMARK_PARALLELISM = 2
#: out-of-orderness bound of the Nexmark watermarks: far above the skew of the source's
#: splits (a few batches), so that no event is ever late and the output is deterministic
NEXMARK_BOUND_MS = 5_000


# -- Nexmark ------------------------------------------------------------------------------
class RaiseAt:
    """``map_batches`` after the Nexmark source: raises once (across attempts: the fault
    plan's markers) when this subtask has passed ``point`` events in this attempt."""

    def __init__(self, plan, points: list[int]) -> None:
        self.plan, self.points = plan, sorted(points)
        self.seen = 0

    def __call__(self, batch):
        before, self.seen = self.seen, self.seen + batch.num_rows
        for p in self.points:
            if before < p <= self.seen:
                self.plan.maybe_fail("record", p, {"events": self.seen})
        return batch


def nexmark_config():
    from bench.nexmark.generator import NexmarkConfig

    return NexmarkConfig(events_per_second=NEXMARK_EVENT_RATE)


def _nexmark_make(*queries: str) -> Callable[[BuildContext], object]:
    """The queries on one Nexmark source (several: a branch each, as issue 51's jobs),
    each into its FileSink ``out/<query>``; default settings but for the run's backend and
    checkpoint mode (buffer debloating on)."""

    def make(ctx: BuildContext):
        from airflow_checkpoint_provider.engine import (
            CheckpointConfig,
            FileSink,
            Pipeline,
            RestartStrategy,
            WatermarkStrategy,
        )
        from bench.nexmark import queries as nexmark

        from .nexmark_source import ChaosNexmarkSource

        p = Pipeline(
            "nexmark-" + "-".join(queries),
            max_parallelism=64,
            batch_size=256,
            state_backend=ctx.backend,
            checkpoint=CheckpointConfig(
                interval_ms=200, unaligned=ctx.unaligned, directory=os.path.join(ctx.root, "ckpt")
            ),
            restart_strategy=RestartStrategy.fixed_delay(attempts=10, delay_ms=0),
            metadata_url="sqlite:///" + os.path.join(ctx.root, "meta.db"),
        )
        events = p.source(
            ChaosNexmarkSource(
                NEXMARK_EVENTS,
                config=nexmark_config(),
                splits=4,
                events_per_second_wall=NEXMARK_WALL_RATE,
            ),
            uid="events",
            parallelism=NEXMARK_PARALLELISM,
            watermarks=WatermarkStrategy.for_bounded_out_of_orderness(
                NEXMARK_BOUND_MS, timestamp_field="date_time"
            ),
        )
        plan = ctx.fault_plan()
        if plan is not None:
            events = events.map_batches(RaiseAt(plan, ctx.raise_points), name="chaos: raise")
        for query in queries:
            out = FileSink(
                os.path.join(ctx.root, "out", query), **nexmark.SINK_OPTIONS.get(query, {})
            )
            # one query keeps the sink uid its cell always had
            uid = "out" if len(queries) == 1 else f"out-{query}"
            nexmark.QUERIES[query](events, NEXMARK_PARALLELISM).sink(out, uid=uid)
        return p

    return make


#: how each query's output is compared with DuckDB's (see reference_duckdb.py)
NEXMARK_OUTPUTS: dict[str, Output] = {
    "q0": Output("out/q0", columns=("auction", "bidder", "price", "date_time", "extra")),
    "q1": Output("out/q1"),
    "q2": Output("out/q2"),
    "q3": Output("out/q3"),
    "q4": Output("out/q4", "upsert", ("category",)),
    "q5": Output("out/q5"),
    "q6": Output("out/q6"),
    "q7": Output(
        "out/q7", columns=("auction", "bidder", "price", "date_time", "extra", "window_end")
    ),
    "q8": Output("out/q8"),
    "q9": Output("out/q9"),
    "q10": Output("out/q10"),
    "q11": Output("out/q11"),
    "q12": Output("out/q12", "upsert", ("bidder", "starttime"), post="q12"),
    "q13": Output("out/q13"),
    "q14": Output("out/q14"),
    "q15": Output("out/q15", "upsert", ("key",)),
    "q16": Output("out/q16", "upsert", ("key",)),
    "q17": Output("out/q17", "upsert", ("auction", "day")),
    "q18": Output(
        "out/q18",
        "upsert",
        ("bidder", "auction"),
        columns=("auction", "bidder", "price", "channel", "url", "date_time", "extra"),
    ),
    # ORDER BY price DESC ranks bids of equal price in no defined order: the rank's price
    "q19": Output(
        "out/q19", "upsert", ("auction", "rank_number"), columns=("auction", "rank_number", "price")
    ),
    "q20": Output("out/q20"),
    "q21": Output("out/q21"),
    "q22": Output("out/q22"),
}
#: q12 windows by processing time: only its per-bidder total is deterministic
NEXMARK_QUERIES = (
    "q0",
    "q1",
    "q2",
    "q3",
    "q4",
    "q5",
    "q6",
    "q7",
    "q8",
    "q9",
    "q10",
    "q11",
    "q12",
    "q13",
    "q14",
    "q15",
    "q16",
    "q17",
    "q18",
    "q19",
    "q20",
    "q21",
    "q22",
)
#: failing after the first restore when this matrix was built (issue 35: tuple map keys
#: come back as lists from heap snapshots: ``unhashable type: 'list'``)
NEXMARK_KNOWN = {
    q: "issue 35: tuple map-state keys do not survive a restore" for q in ("q4", "q6", "q9", "q20")
}


def _nexmark_entries() -> list[Entry]:
    seconds = NEXMARK_EVENTS / NEXMARK_WALL_RATE
    return [
        Entry(
            q,
            "nexmark",
            _nexmark_make(q),
            (NEXMARK_OUTPUTS[q],),
            "duckdb",
            NEXMARK_EVENTS // NEXMARK_PARALLELISM,
            seconds,
        )
        for q in NEXMARK_QUERIES
    ]


#: several queries sharing one source (issue 51: such jobs stalled under buffer debloating
#: while each query alone finished): a bursty window branch (q7: a combiner, then a window
#: that emits when it fires) beside steady keyed ones (q19's top-n, q18's last bid, q0)
MULTI_QUERIES = (("q7", "q19"), ("q0", "q18", "q19"))


def _multi_entries() -> list[Entry]:
    seconds = NEXMARK_EVENTS / NEXMARK_WALL_RATE
    return [
        Entry(
            "+".join(qs),
            "nexmark-multi",
            _nexmark_make(*qs),
            tuple(NEXMARK_OUTPUTS[q] for q in qs),
            "duckdb",
            NEXMARK_EVENTS // NEXMARK_PARALLELISM,
            seconds,
            queries=qs,
        )
        for qs in MULTI_QUERIES
    ]


# -- the tests' pipelines ------------------------------------------------------------------
def _joins_row(ctx: BuildContext):
    from join_pipelines import join_pipeline

    return configure(
        join_pipeline(
            ctx.root, faults=ctx.fault_plan(), rate=1000, out=os.path.join(ctx.root, "out")
        ),
        ctx,
    )


def _joins_vectorized(vectorized: bool):
    def make(ctx: BuildContext):
        from vector_join_pipelines import vector_join_pipeline

        return configure(
            vector_join_pipeline(
                ctx.root,
                vectorized=vectorized,
                faults=ctx.fault_plan(),
                rate=1000,
                out=os.path.join(ctx.root, "out"),
            ),
            ctx,
        )

    return make


def _broadcast_temporal(ctx: BuildContext):
    from broadcast_pipelines import broadcast_pipeline

    return configure(broadcast_pipeline(ctx.root, faults=ctx.fault_plan(), rate=1000), ctx)


def _regular_join(ctx: BuildContext):
    from regular_join_model import join_pipeline

    return configure(join_pipeline(ctx.root, n=12_000, users=400, faults=ctx.fault_plan()), ctx)


def _built_by(module: str, function: str, *args, rate: int = 3000):
    """A builder calling ``module.function(root, *args, rate=, faults=, out=<root>/out)``
    (a tests/*_pipelines.py pipeline with a FileSink under ``out``)."""

    def make(ctx: BuildContext):
        import importlib

        build = getattr(importlib.import_module(module), function)
        return configure(
            build(
                ctx.root,
                *args,
                rate=rate,
                faults=ctx.fault_plan(),
                out=os.path.join(ctx.root, "out"),
            ),
            ctx,
        )

    return make


_sessions = _built_by("perf_pipelines", "session_aggregate_pipeline")
_sessions_row = _built_by("event_time_pipelines", "session_pipeline", "process")
_top_n = _built_by("perf_pipelines", "topn_pipeline")
_count_distinct = _built_by("perf_pipelines", "distinct_pipeline")


def _cdc(ctx: BuildContext):
    from cdc_upsert_pipelines import cdc_upsert_pipeline

    kind = ctx.extra["target"]["kind"]
    return configure(
        cdc_upsert_pipeline(ctx.root, ctx.extra["url"], ctx.extra["target"], name=f"cdc-{kind}"),
        ctx,
    )


OTHER_ENTRIES = [
    Entry(
        "join-interval-window-row",
        "join",
        _joins_row,
        (Output("out/co"), Output("out/ij"), Output("out/wj")),
        "failure-free",
        6000,
        6.0,
    ),
    Entry(
        "join-vectorized",
        "join",
        _joins_vectorized(True),
        (Output("out/ij"), Output("out/tw"), Output("out/sw")),
        "failure-free",
        6000,
        6.0,
    ),
    Entry(
        "join-vectorized-row",
        "join",
        _joins_vectorized(False),
        (Output("out/ij"), Output("out/tw"), Output("out/sw")),
        "failure-free",
        6000,
        6.0,
    ),
    Entry(
        "join-broadcast-temporal",
        "join",
        _broadcast_temporal,
        (Output("rules-out"), Output("priced")),
        "failure-free",
        6000,
        6.0,
    ),
    Entry(
        "join-regular",
        "join",
        _regular_join,
        (Output("joined", "changelog"), Output("per_user", "changelog")),
        "failure-free",
        12_000,
        3.0,
    ),
    Entry("session-windows", "window", _sessions, (Output("out"),), "failure-free", 20_000, 7.0),
    Entry(
        "session-windows-row",
        "window",
        _sessions_row,
        (Output("out"),),
        "failure-free",
        20_000,
        7.0,
    ),
    Entry(
        "top-n",
        "keyed",
        _top_n,
        (Output("out", "upsert", ("key", "rank_number")),),
        "failure-free",
        20_000,
        7.0,
    ),
    Entry(
        "count-distinct",
        "keyed",
        _count_distinct,
        (Output("out", "upsert", ("key",)),),
        "failure-free",
        20_000,
        7.0,
    ),
]

#: CDC (PostgreSQL logical replication, writers changing the table meanwhile) -> keyed ->
#: upsert sink, or -> retracting aggregate -> PostgreSQL upsert sink (tests/
#: cdc_upsert_pipelines.py); reference: the source table (its GROUP BY) once the job caught
#: up, the job then cancelled (see cdc.py). Local runner: the harness's PostgreSQL server.
CDC_ENTRIES = [
    Entry(f"cdc-{kind}", "cdc", _cdc, (), "source-table", 0, 6.0, runners=("local",))
    for kind in ("postgres", "postgres-agg", "delta", "iceberg")
]

CATALOGUE: dict[str, Entry] = {
    e.name: e for e in [*_nexmark_entries(), *_multi_entries(), *OTHER_ENTRIES, *CDC_ENTRIES,
                        *KAFKA_ENTRIES]
}
#: q10 is the partitioned FileSink's cell (every bid into dt=/hm= directories)
ALIASES = {"partitioned-filesink": "q10"}


def entry(name: str) -> Entry:
    name = ALIASES.get(name, name)
    if name not in CATALOGUE:
        raise SystemExit(f"unknown pipeline {name!r}: one of {', '.join(CATALOGUE)}")
    return CATALOGUE[name]
