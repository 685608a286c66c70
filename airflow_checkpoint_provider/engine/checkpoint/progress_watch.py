"""The progress watchdog: a job whose records or watermark stopped somewhere (issue 51).

A job can be exactly-once and still stuck: a branch starved by flow control, an operator
blocked in a user function, a watermark frozen after a restore. Nothing fails, so nothing
reports it. The job master feeds this watchdog what the tasks already send -- cumulative
records in/out per operator and the input watermark, with every :class:`TaskMetrics`
report (about once a second while records flow) and with every checkpoint ack (a
consistent cut at the barrier) -- and asks it once a second whether the job is stalled.

What is measured, per task chain (a vertex: its subtasks summed):

* **queued input**: the records its upstream chains emitted towards it (their last
  operator's ``records_out``; times the parallelism for a broadcast edge) minus the records
  its first operator took in. Records are waiting in front of the chain when this is > 0.
* **movement**: when its counters (in and out of every operator of the chain) last
  changed, and when its input watermark did.

A **records stall**: a chain has input queued, has not moved for ``threshold_s`` and (a
subtask of it) has not acknowledged a checkpoint for as long: a barrier cannot pass
records that do not move, while a chain whose counts only look stale (its last report
lags its work) acks every checkpoint that goes by. With checkpoints off or rarer than
the threshold the counters alone decide. Under backpressure every chain upstream of the
blocked one has input queued and stands still too; the one where records *stopped* is the
most downstream such chain (the chains after it have nothing queued), and the stall names
its first operator (a chain's counters are taken at the end of a batch: which operator
inside the chain holds the batch is not known, so the detail lists the chain). A job that
has no input has nothing queued anywhere: idle, not stalled.

A chain that holds a source has no queued input to count: a source chain whose operator
blocks (a user function chained to the source, or the read itself) is a stall when its
counters have not moved for ``threshold_s`` and it has not acknowledged a checkpoint for
as long while a pending checkpoint waits for it (a source task takes a trigger between two
reads, even under backpressure; an idle one acks every checkpoint). Its first operator
after the source is named (the source when it is alone in its chain); the detail lists
the chain.

A **watermark stall**: an event-time chain (downstream of a source with a watermark
strategy) whose input keeps moving while its watermark stands still: records arrived
over at least ``threshold_s`` since the watermark last advanced, the newest within
``threshold_s`` (the first such chain from the sources is named: where the watermark
stopped). A records stall wins over a watermark stall.

Counts are merged per task by maximum (both sources are cumulative since the attempt
started; :meth:`ProgressWatchdog.reset` starts over with a new attempt). A task reports
at most once a second and only while records pass through it, so its last report may lag
its work (records taken after the last barrier stay uncounted until its next report):
that is why a records stall also needs the chain's acks to have stopped. With periodic
checkpoints off, a job that went idle in the middle of a report interval may show a few
records queued for good and is then reported after ``threshold_s`` (known limit).

Not detected: a branch that flow control starves to a trickle (it moves: slow, not
stalled), and a source held back by credit while nothing is queued anywhere (it looks
idle: tasks do not report the time they wait for credit; a flag in ``TaskMetrics`` would
tell it).

The stall is reported, never acted on: the job master writes it to the job row
(``jobs.progress_stall``, shown by ``ckpt jobs`` and the checkpoint report) and to the
metrics (``ckpt_stalled_seconds{operator}``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ..eventtime import format_watermark
from ..plan.graph import BROADCAST, ExecutionGraph

#: records stall / watermark stall
RECORDS, WATERMARK = "records", "watermark"


@dataclass(frozen=True)
class WatchedChain:
    """What the watchdog knows of a vertex of the job: its operators (``uid or name``, in
    chain order), its main inputs ``(upstream vertex id, factor)`` (factor: how many copies
    of each upstream record it receives, its parallelism for a broadcast edge, else 1)."""

    id: int
    operators: tuple[str, ...]
    inputs: tuple[tuple[int, int], ...] = ()
    is_source: bool = False
    #: an input whose records are not counted as its upstream's output (a side output):
    #: the queued input cannot be computed
    uncounted_input: bool = False
    #: downstream of a source with a watermark strategy
    event_time: bool = False
    parallelism: int = 1


@dataclass(frozen=True)
class Stall:
    """Where and since when a job has not progressed."""

    operator: str
    kind: str  # RECORDS or WATERMARK
    since: float  # monotonic time the chain stopped moving (or its watermark)
    detail: str
    queued: int | None = None
    chain: tuple[str, ...] = ()

    def seconds(self, now: float) -> float:
        return max(0.0, now - self.since)

    def to_json(self, now: float, threshold_s: float) -> dict[str, Any]:
        """The document kept in ``jobs.progress_stall`` (``since``: wall clock, UTC)."""
        since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=self.seconds(now))
        return {"operator": self.operator, "kind": self.kind,
                "since": since.isoformat(timespec="seconds"), "queued": self.queued,
                "chain": list(self.chain), "threshold_s": threshold_s, "detail": self.detail}


@dataclass
class _Movement:
    signature: Any = None
    changed_at: float = 0.0
    head_in: int = 0
    in_changed_at: float = 0.0
    watermark: int | None = None
    wm_changed_at: float = 0.0
    #: when records first arrived after the watermark last moved (None: none since)
    in_after_wm: float | None = None


@dataclass
class ProgressWatchdog:
    """Detects stalls from per-task counters (see the module docstring).

    :param chains: the job's vertices (:meth:`from_graph`).
    :param threshold_s: seconds without progress after which a stall is reported.
    """

    chains: list[WatchedChain]
    threshold_s: float
    _counts: dict[tuple[int, int], dict[str, list[int]]] = field(default_factory=dict)
    _watermarks: dict[tuple[int, int], int] = field(default_factory=dict)
    _moves: dict[int, _Movement] = field(default_factory=dict)
    _acked_at: dict[tuple[int, int], float] = field(default_factory=dict)
    _reset_at: float = 0.0
    _ended: set[tuple[int, int]] | frozenset = frozenset()
    stall: Stall | None = None

    def __post_init__(self) -> None:
        self._by_id = {c.id: c for c in self.chains}
        self._order = _topological(self.chains)
        self._downstream: dict[int, set[int]] = {c.id: set() for c in self.chains}
        for c in self.chains:
            for src, _ in c.inputs:
                self._downstream[src].add(c.id)

    @classmethod
    def from_graph(cls, graph: ExecutionGraph, threshold_s: float) -> ProgressWatchdog:
        by_id = {v.id: v for v in graph.vertices}
        timed: set[int] = set()  # vertices downstream of a source with watermarks
        pending = [v.id for v in graph.vertices
                   if any(n.kind == "source" and n.watermarks is not None for n in v.nodes)]
        while pending:
            vid = pending.pop()
            for e in by_id[vid].outputs:
                if e.target_vertex not in timed:
                    timed.add(e.target_vertex)
                    pending.append(e.target_vertex)
        chains = []
        for v in graph.vertices:
            main = [e for e in v.inputs if getattr(e, "side", None) is None]
            side = any(e.side is not None for u in graph.vertices for e in u.outputs
                       if e.target_vertex == v.id)
            chains.append(WatchedChain(
                id=v.id, operators=tuple(n.uid or n.name for n in v.nodes),
                inputs=tuple((e.source_vertex, v.parallelism if e.partitioning == BROADCAST
                              else 1) for e in main),
                is_source=v.is_source, uncounted_input=side, event_time=v.id in timed,
                parallelism=v.parallelism))
        return cls(chains, threshold_s)

    # -- input ------------------------------------------------------------------------------
    def reset(self, now: float) -> None:
        """A new attempt: its tasks count from 0; nothing has stood still yet."""
        self._counts.clear()
        self._watermarks.clear()
        self._acked_at.clear()
        self._reset_at = now
        self._moves = {c.id: _Movement(changed_at=now, in_changed_at=now, wm_changed_at=now)
                       for c in self.chains}
        self.stall = None

    def on_counts(self, task: tuple[int, int], counts: dict[str, Any] | None,
                  watermark: int | None = None) -> None:
        """Cumulative ``{operator: [in, out]}`` of a task (a metrics report or the
        ``records`` of a checkpoint ack) and its input watermark."""
        mine = self._counts.setdefault(task, {})
        for op, pair in (counts or {}).items():
            was = mine.get(op)
            n_in, n_out = int(pair[0]), int(pair[1])
            mine[op] = [n_in, n_out] if was is None else [max(was[0], n_in), max(was[1], n_out)]
        if watermark is not None:
            self._watermarks[task] = max(watermark, self._watermarks.get(task, watermark))

    def on_ack(self, task: tuple[int, int], now: float) -> None:
        """``task`` acknowledged a checkpoint at ``now``."""
        self._acked_at[task] = now

    # -- the verdict --------------------------------------------------------------------------
    def check(self, now: float, awaited: set[tuple[int, int]] | frozenset = frozenset(),
              ended: set[tuple[int, int]] | frozenset = frozenset()) -> Stall | None:
        """Update what moved; return the current stall (``None``: the job progresses).
        ``awaited``: the tasks a pending checkpoint waits for (their ack); ``ended``: the
        tasks whose input ended (they processed all of it: never stalled, and they may
        stop acking)."""
        totals = {c.id: self._totals(c) for c in self.chains}
        for c in self.chains:
            self._observe(c, totals[c.id], now)
        self._ended = ended
        self.stall = (self._records_stall(totals, now) or self._source_stall(now, awaited)
                      or self._watermark_stall(now))
        return self.stall

    def _totals(self, chain: WatchedChain) -> dict[str, list[int]]:
        out = {op: [0, 0] for op in chain.operators}
        for sub in range(chain.parallelism):
            for op, (n_in, n_out) in self._counts.get((chain.id, sub), {}).items():
                if op in out:
                    out[op][0] += n_in
                    out[op][1] += n_out
        return out

    def _chain_watermark(self, chain: WatchedChain) -> int | None:
        marks = [self._watermarks.get((chain.id, s)) for s in range(chain.parallelism)]
        return None if any(m is None for m in marks) else min(m for m in marks if m is not None)

    def _observe(self, chain: WatchedChain, totals: dict[str, list[int]], now: float) -> None:
        m = self._moves.setdefault(chain.id, _Movement(changed_at=now, in_changed_at=now,
                                                       wm_changed_at=now))
        wm = self._chain_watermark(chain)
        # records only: a watermark cannot pass records queued before it in a channel
        signature = tuple(tuple(v) for v in totals.values())
        if signature != m.signature:
            m.signature, m.changed_at = signature, now
        head_in = totals[chain.operators[0]][0] if chain.operators else 0
        if wm != m.watermark:
            m.watermark, m.wm_changed_at, m.in_after_wm = wm, now, None
        if head_in != m.head_in:
            m.head_in, m.in_changed_at = head_in, now
            if m.in_after_wm is None and m.wm_changed_at != now:
                m.in_after_wm = now

    def queued(self, chain: WatchedChain, totals: dict[int, dict[str, list[int]]]) -> int | None:
        """Records emitted towards ``chain`` that its first operator has not taken in."""
        if chain.is_source or not chain.inputs or chain.uncounted_input:
            return None
        sent = 0
        for src, factor in chain.inputs:
            upstream = self._by_id[src]
            sent += totals[src][upstream.operators[-1]][1] * factor
        return sent - totals[chain.id][chain.operators[0]][0]

    def _records_stall(self, totals: dict[int, dict[str, list[int]]], now: float) -> Stall | None:
        stuck: dict[int, int] = {}
        for c in self.chains:
            q = self.queued(c, totals)
            if (q is not None and q > 0 and now - self._moves[c.id].changed_at >= self.threshold_s
                    and self._silent(c, now)):
                stuck[c.id] = q
        # where records stopped: a stuck chain with no stuck chain after it (those before it
        # stand still because it does: backpressure)
        for cid in self._order:
            if cid in stuck and not (self._after(cid) & stuck.keys()):
                c = self._by_id[cid]
                since = max(self._moves[cid].changed_at, self._last_ack(c, now))
                return Stall(
                    operator=c.operators[0], kind=RECORDS, since=since, queued=stuck[cid],
                    chain=c.operators,
                    detail=(f"{stuck[cid]:,} records queued in front of operator "
                            f"{c.operators[0]!r} (chain {' -> '.join(c.operators)}), none "
                            f"taken for {now - since:.0f} s"))
        return None

    def _source_stall(self, now: float, awaited: set[tuple[int, int]] | frozenset
                      ) -> Stall | None:
        for cid in self._order:
            c, m = self._by_id[cid], self._moves[cid]
            if not c.is_source or now - m.changed_at < self.threshold_s:
                continue
            silent = [s for s in self._silent(c, now) if (cid, s) in awaited]
            if silent:
                since = max(m.changed_at, min(self._acked_at.get((cid, s), self._reset_at)
                                              for s in silent))  # the silence began
                name = c.operators[1] if len(c.operators) > 1 else c.operators[0]
                return Stall(
                    operator=name, kind=RECORDS, since=since, chain=c.operators,
                    detail=(f"the task of chain {' -> '.join(c.operators)} (subtask "
                            f"{', '.join(str(s + 1) for s in silent)}) has not moved a record "
                            f"nor taken a checkpoint for {now - since:.0f} s: an operator of "
                            f"the chain (first after the source: {name!r}) is blocked"))
        return None

    def _silent(self, chain: WatchedChain, now: float) -> list[int]:
        """The subtasks of ``chain`` whose input has not ended that have not acked a
        checkpoint for the threshold."""
        return [s for s in range(chain.parallelism) if (chain.id, s) not in self._ended
                and now - self._acked_at.get((chain.id, s), self._reset_at) >= self.threshold_s]

    def _last_ack(self, chain: WatchedChain, now: float) -> float:
        """The oldest last ack of the chain's silent subtasks (when the silence began)."""
        return min((self._acked_at.get((chain.id, s), self._reset_at)
                    for s in self._silent(chain, now)), default=self._reset_at)

    def _watermark_stall(self, now: float) -> Stall | None:
        for cid in self._order:
            c, m = self._by_id[cid], self._moves[cid]
            # records kept arriving (the last one within the threshold) for at least the
            # threshold since the watermark last moved; sparse input (a record now and then,
            # its watermark seen a moment later) is not a stall
            if (c.event_time and not c.is_source and m.in_after_wm is not None
                    and not all((cid, s) in self._ended for s in range(c.parallelism))
                    and now - m.in_changed_at < self.threshold_s
                    and m.in_changed_at - m.in_after_wm >= self.threshold_s):
                at = "none yet" if m.watermark is None else format_watermark(m.watermark)
                return Stall(
                    operator=c.operators[0], kind=WATERMARK, since=m.wm_changed_at,
                    chain=c.operators,
                    detail=(f"the input watermark of operator {c.operators[0]!r} has not "
                            f"advanced for {now - m.wm_changed_at:.0f} s ({at}) while "
                            "records keep arriving"))
        return None

    def _after(self, cid: int) -> set[int]:
        """Every chain downstream of ``cid``."""
        seen: set[int] = set()
        todo = list(self._downstream[cid])
        while todo:
            nxt = todo.pop()
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(self._downstream[nxt])
        return seen


def _topological(chains: list[WatchedChain]) -> list[int]:
    """Chain ids, sources first (every chain after its inputs)."""
    order: list[int] = []
    placed: set[int] = set()
    remaining = list(chains)
    while remaining:
        ready = [c for c in remaining if all(src in placed for src, _ in c.inputs)]
        if not ready:  # a cycle (none in a job graph): keep the given order
            ready = remaining[:1]
        for c in ready:
            order.append(c.id)
            placed.add(c.id)
        remaining = [c for c in remaining if c.id not in placed]
    return order


__all__ = ["RECORDS", "WATERMARK", "ProgressWatchdog", "Stall", "WatchedChain"]
