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
import logging
import os
import resource
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import cloudpickle

from ..graph import FORWARD, ExecutionGraph, channels_for_input
from ..serialization import unpackb
from . import protocol as P
from .batches import decode_arrow
from .mailbox import Mailbox
from .task import OutputChannel, RecordWriter, StreamTask, TaskEnvironment

log = logging.getLogger(__name__)


class SlotAborted(Exception):
    """The coordinator went away; the slot stops."""


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
                ok = mailbox.put_data(("records", channel, decode_arrow(payload)))
            elif kind == P.RECORDS:
                ok = mailbox.put_data(("records", channel, unpackb(payload)))
            elif kind == P.BARRIER:
                ok = mailbox.put_data(("barrier", channel, unpackb(payload)))
            elif kind == P.CANCEL:
                ok = mailbox.put_data(("cancel", channel, unpackb(payload)))
            elif kind == P.END_OF_INPUT:
                ok = mailbox.put_data(("eoi", channel, None))
            else:
                raise P.ConnectionClosed(f"unexpected frame type {kind}")
            if not ok:
                return
    except (P.ConnectionClosed, OSError):
        mailbox.put_data(("closed", channel, None))
    finally:
        sock.close()


def run_slot(slot: int, attempt: int, coordinator: tuple[str, int], *,
             exchange_peers=None, bind_host: str = "127.0.0.1",
             advertise_host: str | None = None) -> None:
    """Run one slot until the job finishes it (``finish``) or the coordinator goes away."""
    ctl = P.ControlConnection(P.connect(*coordinator))
    ctl.send({"type": "register", "slot": slot, "attempt": attempt, "pid": os.getpid(),
              "host": socket.gethostname()})
    msg = ctl.recv()
    if msg.get("type") != "job":
        raise SlotAborted(f"expected the job description, got {msg.get('type')}")
    job = cloudpickle.loads(msg["payload"])
    graph: ExecutionGraph = job["graph"]

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, P.DATA_SOCKET_BUFFER)  # inherited
    server.bind((bind_host, 0))
    server.listen(128)
    address = [advertise_host or bind_host, server.getsockname()[1]]
    if exchange_peers is not None:
        peers = {int(k): v for k, v in exchange_peers(address).items()}
    else:
        ctl.send({"type": "address", "slot": slot, "attempt": attempt, "address": address})
        reply = ctl.recv()
        peers = {int(k): v for k, v in reply["peers"].items()}

    def send(m: dict) -> None:
        m["slot"] = slot
        m["attempt"] = attempt
        ctl.send(m)

    upload_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"upload-{slot}")
    env = TaskEnvironment(job_id=job["job_id"], job_name=job["job_name"], attempt=attempt,
                          graph=graph, job_dir=job["job_dir"], exactly_once=job["exactly_once"],
                          batch_size=job["batch_size"], send=send, upload_pool=upload_pool,
                          source_splits=job.get("source_splits"),
                          state_backend=job.get("state_backend"))
    local = graph.tasks_in_slot(slot)
    mailboxes = {t: Mailbox(job.get("mailbox_capacity", 8)) for t in local}
    gates = {t: {c: threading.Event() for c in range(graph.vertex(t[0]).num_input_channels())}
             for t in local}
    for g in gates.values():
        for e in g.values():
            e.set()

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kind, payload = P.recv_frame(conn)
            hello = unpackb(payload)
            key = (hello["vertex"], hello["subtask"])
            ch = hello["channel"]
            threading.Thread(target=_reader, args=(conn, ch, mailboxes[key], gates[key][ch]),
                             name=f"reader-{key}-{ch}", daemon=True).start()

    threading.Thread(target=accept_loop, name=f"accept-{slot}", daemon=True).start()

    start_gate = threading.Event()
    tasks: list[StreamTask] = []
    for vid, sub in local:
        vertex = graph.vertex(vid)
        writers = []
        for out in vertex.outputs:
            targets = [sub] if out.partitioning == FORWARD else list(range(out.target_parallelism))
            channels = []
            for j in targets:
                host, port = peers[j]
                sock = P.connect(host, port, buffer=P.DATA_SOCKET_BUFFER)
                ch_index = input_channel_index(graph, out.target_vertex, vid, sub)
                P.send_frame(sock, P.HELLO, P.packb({"vertex": out.target_vertex, "subtask": j,
                                                     "channel": ch_index}))
                channels.append(OutputChannel(sock))
            writers.append(RecordWriter(out.partitioning, channels, out.key_selector,
                                        graph.max_parallelism, sub))
        tasks.append(StreamTask(env, vertex, sub, job["restore"].get((vid, sub)),
                                mailboxes[(vid, sub)], writers, gates[(vid, sub)], start_gate))
    for t in tasks:
        t.start()
    # RUNNING means every operator restored its state and opened (as a Flink task turns
    # RUNNING after restore): checkpoints are triggered from then on, and the job master's
    # start-up time includes the restore.
    for t in tasks:
        t.opened.wait()
    start_gate.set()
    if not any(t.open_failed for t in tasks):
        send({"type": "running"})

    sources = [t for t in tasks if t.vertex.is_source]
    done = threading.Event()

    def control_loop() -> None:
        try:
            while not done.is_set():
                m = ctl.recv()
                kind = m["type"]
                if kind == "trigger":
                    item = ("trigger", [m["checkpoint_id"], m["timestamp"], m["kind"], m["location"]])
                    for t in sources:
                        t.mailbox.put_control(item)
                elif kind in ("notify", "abort"):
                    for t in tasks:
                        t.mailbox.put_control((kind, m["checkpoint_id"]))
                elif kind == "finish":
                    for t in tasks:
                        t.mailbox.put_control(("finish",))
        except (P.ConnectionClosed, OSError):
            if not done.is_set():
                log.warning("Slot %d lost its coordinator; stopping", slot)
                for t in tasks:
                    t.finished = True
                    t.mailbox.close()
                for g in gates.values():
                    for e in g.values():
                        e.set()

    ctl_thread = threading.Thread(target=control_loop, name=f"control-{slot}", daemon=True)
    ctl_thread.start()
    for t in tasks:
        t.thread.join()
    upload_pool.shutdown(wait=True)
    done.set()
    server.close()
    try:
        # peak resident memory of this process (Linux reports KiB): one slot per process
        # on the local runner; on Spark, the Python worker that ran the slot
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        send({"type": "slot_finished", "peak_rss_mb": round(peak, 1)})
    except OSError as exc:
        raise SlotAborted(f"slot {slot}: coordinator connection lost") from exc
    ctl.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one slot of a checkpointed job.")
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--coordinator", required=True, help="host:port")
    parser.add_argument("--bind-host", default="127.0.0.1")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("CKPT_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s slot-" + str(args.slot) + " %(name)s: %(message)s")
    host, port = args.coordinator.rsplit(":", 1)
    try:
        run_slot(args.slot, args.attempt, (host, int(port)), bind_host=args.bind_host)
    except (SlotAborted, P.ConnectionClosed, ConnectionError) as exc:
        log.warning("slot %d ended: %s", args.slot, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
