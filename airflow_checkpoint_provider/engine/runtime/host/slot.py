"""A slot: one process (local runner) or one Spark barrier task (Spark runner) that hosts
subtask ``i`` of every vertex whose parallelism is greater than ``i``.

Start-up protocol with the coordinator (control connection, msgpack maps):

1. slot -> ``register`` {slot, attempt, pid, host}
2. coordinator -> ``job`` {payload: cloudpickled job description for this slot}
3. the slot opens its data server; peers' ``host:port`` are exchanged either through the
   coordinator (``address`` -> ``peers``) or by the caller's ``exchange_peers`` (Spark's
   ``BarrierTaskContext.allGather``)
4. output channels connect to their downstream slots and say ``HELLO``
5. task threads start and open their operators (restoring state); once every one has,
   slot -> ``running``; the control loop dispatches
   ``trigger``/``notify``/``abort``/``finish`` to task mailboxes
6. slot -> ``slot_finished`` once every task ended after ``finish``
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import resource
import select
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cloudpickle

from ...plan.graph import FORWARD, ExecutionGraph, channels_for_input
from ...protocol import ProtocolError
from ...protocol import frames as P
from ...protocol import messages as M
from ...serialization import unpack_records, unpackb
from ...settings import LOG_LEVEL, SLOT_ORPHAN_EXIT
from ..batches import decode_arrow
from ..task.debloat import INITIAL_CHANNEL_CREDIT, CreditAnnouncer
from ..task.environment import TaskEnvironment
from ..task.mailbox import (
    AbortCheckpoint,
    Finish,
    ItemKind,
    Mailbox,
    NotifyComplete,
    TriggerCheckpoint,
    Unalign,
)
from ..task.stream_task import StreamTask
from .auth import (
    MAX_PENDING_HANDSHAKES,
    connect_authenticated,
    secret_from_env,
    serve_authenticated,
)
from .channels import LocalChannel, OutputChannel, RecordWriter, event_item

log = logging.getLogger(__name__)


class SlotAborted(Exception):
    """The coordinator went away; the slot stops."""


# a slot whose coordinator is gone (its control connection closed, or TCP keepalive found
# the driver's host unreachable) ends its process after settings.SLOT_ORPHAN_EXIT seconds
# if it has not ended by itself: a task stuck in user code must not hold a Spark core
#: exit code of a slot process ended that way
ORPHAN_EXIT_CODE = 75
#: seconds a recycled slot's tasks have to end before the slot fails instead
RECYCLE_SECONDS = 15.0
#: TCP keepalive of the control connection: idle seconds, probe interval, probes
KEEPALIVE = (5, 2, 3)


def _keepalive(sock: socket.socket) -> None:
    """Let the kernel notice a driver host that vanished without closing the connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval, count = KEEPALIVE
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):  # Linux; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def connection_closed(sock: socket.socket) -> bool:
    """Whether the peer closed ``sock`` (or it broke), without consuming anything: a peek.
    Pending data means the connection is alive (the reader will consume it)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def input_channel_index(graph: ExecutionGraph, target_vertex: int, source_vertex: int,
                        source_subtask: int) -> int:
    """Index of the channel from ``source_vertex[source_subtask]`` at a ``target_vertex`` subtask."""
    target = graph.vertex(target_vertex)
    base = 0
    for edge in target.inputs:
        if edge.source_vertex == source_vertex:
            return base + (0 if edge.partitioning == FORWARD else source_subtask)
        base += channels_for_input(edge, target.parallelism)
    raise KeyError(f"vertex {source_vertex} is not an input of vertex {target_vertex}")


def _reader(sock: socket.socket, channel: int, mailbox: Mailbox, gate: threading.Event) -> None:
    """Read one input channel into the mailbox. ``gate`` is cleared by the task while the
    channel is blocked for barrier alignment: the reader then waits before its next item."""
    try:
        while True:
            kind, payload = P.recv_frame(sock)
            gate.wait()
            if kind == P.ARROW:
                ok = mailbox.put_data((ItemKind.RECORDS, channel, decode_arrow(payload)))
            elif kind == P.RECORDS:
                ok = mailbox.put_data((ItemKind.RECORDS, channel, unpack_records(payload)))
            else:
                ok = mailbox.put_data(event_item(kind, payload, channel))
            if not ok:
                return
    except ProtocolError as exc:
        log.error("Input channel %d sent an invalid frame: %s", channel, exc)
        mailbox.put_data((ItemKind.CLOSED, channel, None))
    except (P.ConnectionClosed, OSError):
        mailbox.put_data((ItemKind.CLOSED, channel, None))
    finally:
        sock.close()


def run_slot(slot: int, attempt: int, coordinator: tuple[str, int], *,
             exchange_peers=None, bind_host: str = "127.0.0.1",
             advertise_host: str | None = None, placement: dict | None = None,
             secret: bytes | None = None, orphan_exit: float | None = None) -> None:
    """Run one slot until the job finishes it (``finish``) or the coordinator goes away.
    ``placement``: where the runner put this slot (e.g. the Spark executor), recorded by the
    job master in ``job_attempts.placement``. ``secret``: the job's secret, proven on every
    connection (``runtime/host/auth.py``). ``orphan_exit``: seconds after the coordinator is
    gone at which a slot still running ends this whole process (``os._exit``); only for a
    process that hosts nothing but this slot (a slot process, a Spark Python worker).

    A slot told to host the next attempt (``recycle``, a PROMOTE) runs it in this process
    once its tasks ended: a warm slot (no new process, no new Spark task). Its peers'
    addresses then come through the coordinator: Spark's ``allGather`` takes at least a
    second (its task waits on the barrier's answer in steps of one second)."""
    recycled_in: float | None = None
    while True:
        current = Slot(slot, attempt, secret, orphan_exit=orphan_exit, recycled_in=recycled_in)
        current.run(coordinator,
                    exchange_peers=exchange_peers if recycled_in is None else None,
                    bind_host=bind_host, advertise_host=advertise_host, placement=placement)
        if current.recycle_to is None:
            return
        log.info("Slot %d hosts attempt %d in the same process (attempt %d's tasks ended in "
                 "%.2f s)", slot, current.recycle_to, attempt, current.recycled_in or 0.0)
        attempt, recycled_in = current.recycle_to, current.recycled_in


class Slot:
    """One slot: subtask ``slot`` of every operator, in this process.

    :meth:`run` does, in order: 1. register with the coordinator and receive the job;
    2. open the data server and learn the peers' addresses; 3. build the tasks and connect
    their output channels; 4. start them, report RUNNING once every operator restored and
    opened; 5. follow the coordinator's commands until every task ended; 6. report the end.
    """

    def __init__(self, slot: int, attempt: int, secret: bytes | None, *,
                 orphan_exit: float | None = None, recycled_in: float | None = None) -> None:
        self.slot, self.attempt, self.secret = slot, attempt, secret
        self.orphan_exit = orphan_exit
        #: the attempt this process hosts next (``recycle``): set when the coordinator asks
        self.recycle_to: int | None = None
        #: seconds from the ``recycle`` to every task ended (this slot's, or the previous
        #: attempt's for a recycled slot: its start-up phase ``recycle``)
        self.recycled_in = recycled_in
        self._recycle_asked = 0.0
        self.tasks: list[StreamTask] = []
        self.done = threading.Event()
        #: set once :meth:`run` returned or raised: the process is no longer this slot's
        #: (a Spark Python worker is reused by later tasks), the watchdog stands down
        self.released = threading.Event()

    def send(self, m: M.FromSlot) -> None:
        self.ctl.send(dataclasses.replace(m, slot=self.slot, attempt=self.attempt))

    def run(self, coordinator: tuple[str, int], *, exchange_peers, bind_host: str,
            advertise_host: str | None, placement: dict | None) -> None:
        try:
            self._run(coordinator, exchange_peers=exchange_peers, bind_host=bind_host,
                      advertise_host=advertise_host, placement=placement)
        finally:
            gc.unfreeze()  # a reused Spark Python worker collects this slot's objects again
            self.released.set()

    def _run(self, coordinator: tuple[str, int], *, exchange_peers, bind_host: str,
             advertise_host: str | None, placement: dict | None) -> None:
        # 1. register, receive the job (each step's seconds reach the attempt's placement)
        t0 = time.monotonic()
        phases: dict[str, float] = {}

        def phase(name: str) -> None:
            nonlocal t0
            now = time.monotonic()
            phases[name] = round(now - t0, 3)
            t0 = now

        if self.recycled_in is not None:
            phases["recycle"] = self.recycled_in
        job = self._register(coordinator, placement)
        phase("register")
        if self.orphan_exit is not None:
            threading.Thread(target=self._watchdog, args=(self.ctl.sock, self.orphan_exit),
                             name=f"watchdog-{self.slot}", daemon=True).start()
        graph: ExecutionGraph = job["graph"]
        # 2. data server, peers
        server = self._serve_data(bind_host)
        address = [advertise_host or bind_host, server.getsockname()[1]]
        if exchange_peers is not None:
            peers = {int(k): v for k, v in exchange_peers(address).items()}
        else:
            self.send(M.Address(address=address))
            msg = self.ctl.recv()
            if not isinstance(msg, M.Peers):
                raise SlotAborted(f"expected the peers' addresses, got {msg.TYPE}")
            peers = {int(k): v for k, v in msg.peers.items()}
        phase("peers")
        # 3. tasks and their output channels
        upload_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"upload-{self.slot}")
        env = TaskEnvironment(job_id=job["job_id"], job_name=job["job_name"],
                              attempt=self.attempt, graph=graph, job_dir=job["job_dir"],
                              exactly_once=job["exactly_once"], batch_size=job["batch_size"],
                              arrow_batch_size=job.get("arrow_batch_size"),
                              send=self.send, upload_pool=upload_pool,
                              source_splits=job.get("source_splits"),
                              state_backend=job.get("state_backend"),
                              fence_sinks=bool(job.get("fence_sinks", False)))
        start_gate = threading.Event()
        for vid, sub in self.local:
            self.tasks.append(StreamTask(env, graph.vertex(vid), sub, job["restore"].get((vid, sub)),
                                         self.mailboxes[(vid, sub)],
                                         self._writers(graph, vid, sub, peers),
                                         self.gates[(vid, sub)], start_gate))
        # 4. start; RUNNING means every operator restored its state and opened (as a Flink
        # task turns RUNNING after restore): checkpoints are triggered from then on
        phase("channels")
        for t in self.tasks:
            t.start()
        for t in self.tasks:
            t.opened.wait()
        phase("restore")
        # the job's code, its restored state and the modules they imported stay for the
        # slot's life: out of the collector's reach, a full collection scans only the
        # records in flight (each scanned them all again, ~90 ms in a small job)
        gc.collect(1)
        gc.freeze()
        start_gate.set()
        if not any(t.open_failed for t in self.tasks):
            self.send(M.Running(phases=phases))
        # 5. the coordinator's commands, until every task ended
        threading.Thread(target=self._control_loop, name=f"control-{self.slot}",
                         daemon=True).start()
        self._join_tasks()
        if self.recycle_to is not None:  # the next attempt runs in this process
            upload_pool.shutdown(wait=True, cancel_futures=True)  # the aborted checkpoint's
            self.done.set()
            server.close()
            self.recycled_in = round(time.monotonic() - self._recycle_asked, 3)
            self.released.set()
            self.ctl.close()
            return
        upload_pool.shutdown(wait=True)
        self.done.set()
        server.close()
        # 6. the end, with the peak resident memory of this process (Linux reports KiB)
        try:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            self.send(M.SlotFinished(peak_rss_mb=round(peak, 1)))
        except OSError as exc:
            raise SlotAborted(f"slot {self.slot}: coordinator connection lost") from exc
        self.released.set()  # before the close: the watchdog must not take it for a loss
        self.ctl.close()

    def _join_tasks(self) -> None:
        """Wait for every task thread; once the coordinator asked to recycle this slot, for
        at most ``RECYCLE_SECONDS``: a task that does not end fails the slot (the job master
        then starts the next attempt in new processes, this one ends)."""
        for t in self.tasks:
            while t.thread.is_alive():
                t.thread.join(0.2)
                if self.recycle_to is not None and t.thread.is_alive() and \
                        time.monotonic() - self._recycle_asked > RECYCLE_SECONDS:
                    raise SlotAborted(
                        f"slot {self.slot}: task {t.name} of attempt {self.attempt} did not "
                        f"end within {RECYCLE_SECONDS:.0f} s of the recycle to attempt "
                        f"{self.recycle_to}")

    def _watchdog(self, sock: socket.socket, grace: float) -> None:
        """End this process ``grace`` seconds after the coordinator went away, unless the
        slot ended by then. Watches the control connection without reading from it (the
        control loop reads), from registration on: also while the slot waits in Spark's
        ``allGather`` or for a task stuck in user code, where nothing else would notice."""
        # poll(), not select(): no limit on the descriptor's number. POLLRDHUP (Linux): the
        # peer closed even while a message it sent before is still unread
        hangup = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)
        poller = select.poll()
        poller.register(sock, select.POLLIN | hangup)
        while not self.released.is_set():
            try:
                ready = poller.poll(1000)
            except (OSError, ValueError):  # closed under us
                ready = [(-1, select.POLLHUP)]
            if not ready:
                continue
            if self.released.is_set() or any(ev & hangup for _, ev in ready) \
                    or connection_closed(sock):
                break
            time.sleep(0.2)  # a message waits for the control loop
        if self.released.wait(grace):
            return
        log.error("Slot %d (attempt %d): the coordinator is gone and the slot did not end "
                  "within %.0f s; ending process %d", self.slot, self.attempt, grace,
                  os.getpid())
        for h in logging.getLogger().handlers:
            try:
                h.flush()
            except Exception:  # noqa: BLE001, S110 - exiting anyway
                pass
        os._exit(ORPHAN_EXIT_CODE)

    def _register(self, coordinator: tuple[str, int], placement: dict | None) -> dict:
        # prove we belong to this job, and check the coordinator does too, before anything
        # it sends is decoded (the job description is unpickled: code from the coordinator)
        sock, limit = connect_authenticated(*coordinator, self.secret, "control")
        _keepalive(sock)
        # the coordinator's frame limit ($CKPT_MAX_FRAME_BYTES where the job was started)
        # holds for every connection of this slot; a task over it fails with the option named
        P.set_frame_limit(limit if limit is not None else P.frame_limit(), check_sends=True)
        self.ctl = P.ControlConnection(sock)
        self.send(M.Register(pid=os.getpid(), host=socket.gethostname(),
                             placement=placement or {}))
        msg = self.ctl.recv()
        if not isinstance(msg, M.JobDescription):
            raise SlotAborted(f"expected the job description, got {msg.TYPE}")
        job = cloudpickle.loads(msg.payload)
        graph: ExecutionGraph = job["graph"]
        self.num_slots = graph.num_slots
        self.local = graph.tasks_in_slot(self.slot)
        capacity = job.get("mailbox_capacity", 8)
        target_ms = job.get("debloat_target_ms")
        self.credit_based = target_ms is not None
        largest = max(job["batch_size"], job.get("arrow_batch_size") or 0)
        self.mailboxes = {
            t: Mailbox(capacity, channels=graph.vertex(t[0]).num_input_channels(),
                       target_s=None if target_ms is None else target_ms / 1000.0,
                       initial_credit=min(job["batch_size"], INITIAL_CHANNEL_CREDIT),
                       # a fast consumer keeps what its mailbox held before debloating
                       max_credit=capacity * largest)
            for t in self.local}
        self.gates = {t: {c: threading.Event()
                          for c in range(graph.vertex(t[0]).num_input_channels())}
                      for t in self.local}
        for g in self.gates.values():
            for e in g.values():
                e.set()
        return job

    def _serve_data(self, bind_host: str) -> socket.socket:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, P.DATA_SOCKET_BUFFER)  # inherited
        server.bind((bind_host, 0))
        server.listen(128)
        # every other slot connects here at once when the job starts: room for all of them
        serve_authenticated(server, self.secret, "data", self._serve_channel,
                            name=f"accept-{self.slot}",
                            capacity=max(MAX_PENDING_HANDSHAKES, 2 * self.num_slots))
        return server

    def _serve_channel(self, conn: socket.socket) -> None:
        """An input channel, once its peer has authenticated: its HELLO, then its data."""
        try:
            kind, payload = P.recv_frame(conn)
            hello: Any = unpackb(payload)  # untrusted: a bad shape is one of the errors below
            key = (hello["vertex"], hello["subtask"])
            ch = hello["channel"]
            mailbox, gate = self.mailboxes[key], self.gates[key][ch]
        except (P.ConnectionClosed, OSError, KeyError, TypeError, ValueError,
                ProtocolError) as exc:
            log.warning("Slot %d dropped a data connection with a bad HELLO: %s", self.slot, exc)
            conn.close()
            return
        mailbox.set_announcer(ch, CreditAnnouncer(conn))  # its first credit (debloat.py)
        _reader(conn, ch, mailbox, gate)

    def _writers(self, graph: ExecutionGraph, vid: int, sub: int,
                 peers: dict[int, list]) -> list[RecordWriter]:
        writers = []
        for out in graph.vertex(vid).outputs:
            targets = [sub] if out.partitioning == FORWARD else list(range(out.target_parallelism))
            channels: list[OutputChannel | LocalChannel] = []
            for j in targets:
                ch_index = input_channel_index(graph, out.target_vertex, vid, sub)
                if j == self.slot:  # subtask j of every operator runs in slot j: this process
                    target = (out.target_vertex, j)
                    channels.append(LocalChannel(self.mailboxes[target],
                                                 self.gates[target][ch_index], ch_index))
                    continue
                host, port = peers[j]
                # the peer proves the secret before it gets a HELLO or any record
                sock, _ = connect_authenticated(host, port, self.secret, "data",
                                                buffer=P.DATA_SOCKET_BUFFER)
                P.send_frame(sock, P.HELLO, P.packb({"vertex": out.target_vertex, "subtask": j,
                                                     "channel": ch_index}))
                channels.append(OutputChannel(sock, credit_based=self.credit_based))
            writers.append(RecordWriter(out.partitioning, channels, out.key_selector,
                                        graph.max_parallelism, sub, side=out.side))
        return writers

    def _control_loop(self) -> None:
        try:
            while not self.done.is_set() and self.recycle_to is None:
                self._dispatch(self.ctl.recv())
        except (P.ConnectionClosed, OSError, ProtocolError) as exc:
            if isinstance(exc, ProtocolError):
                log.error("Slot %d got an invalid message from its coordinator: %s",
                          self.slot, exc)
            if not self.done.is_set() and self.recycle_to is None:
                log.warning("Slot %d lost its coordinator; stopping", self.slot)
                self._stop_tasks()

    def _stop_tasks(self) -> None:
        """End every task of this attempt where it is (lost coordinator, recycle)."""
        for t in self.tasks:
            t.finished = True
            t.mailbox.close()
        for g in self.gates.values():
            for e in g.values():
                e.set()

    def _dispatch(self, m: M.Message) -> None:
        """One coordinator command, to the mailboxes of the tasks it concerns."""
        if isinstance(m, M.Trigger):
            item = TriggerCheckpoint(m.barrier())
            for t in self.tasks:
                if t.vertex.is_source:
                    t.mailbox.put_control(item)
        elif isinstance(m, M.Unalign):
            for t in self.tasks:
                if not t.vertex.is_source:
                    t.mailbox.begin_unaligned(m.checkpoint_id)  # read ahead now
                    t.mailbox.put_control(Unalign(m.checkpoint_id))
        elif isinstance(m, M.Notify | M.Abort):
            for t in self.tasks:
                if isinstance(m, M.Abort):
                    t.mailbox.end_unaligned(m.checkpoint_id)
                    t.mailbox.put_control(AbortCheckpoint(m.checkpoint_id))
                else:
                    t.mailbox.put_control(NotifyComplete(m.checkpoint_id))
        elif isinstance(m, M.Finish):
            for t in self.tasks:
                t.mailbox.put_control(Finish())
        elif isinstance(m, M.Recycle):
            # this attempt ends (its tasks stop as on a lost coordinator: nothing they
            # staged is published) and the process hosts attempt ``m.attempt``
            self._recycle_asked = time.monotonic()
            self.recycle_to = m.attempt
            self._stop_tasks()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one slot of a checkpointed job.")
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--coordinator", required=True, help="host:port")
    parser.add_argument("--bind-host", default="127.0.0.1")
    parser.add_argument("--failure-file", default=None,
                        help="where to write the traceback if the slot fails (read by the "
                             "launcher into the job's failure reason)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=LOG_LEVEL.get(),
                        format="%(asctime)s %(levelname)s slot-" + str(args.slot) + " %(name)s: %(message)s")
    host, port = args.coordinator.rsplit(":", 1)
    try:
        run_slot(args.slot, args.attempt, (host, int(port)), bind_host=args.bind_host,
                 secret=secret_from_env(), orphan_exit=SLOT_ORPHAN_EXIT.get())
    except (SlotAborted, P.ConnectionClosed, OSError, ProtocolError) as exc:
        log.warning("slot %d ended: %s", args.slot, exc)
        note_failure(args.failure_file)
        return 1
    except Exception:
        # e.g. the job description does not unpickle here (a module the slot cannot
        # import), a peer refused its connection: the launcher carries it into the reason
        note_failure(args.failure_file)
        raise
    return 0


def note_failure(path: str | None) -> None:
    """Write the exception being handled, with its traceback, to ``path`` (atomically)."""
    if not path:
        return
    try:
        with open(path + ".tmp", "w") as f:
            f.write(traceback.format_exc())
        os.replace(path + ".tmp", path)
    except OSError as exc:
        log.warning("Could not write the slot's failure to %s: %s", path, exc)


if __name__ == "__main__":
    sys.exit(main())
