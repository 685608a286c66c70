"""A fair Flink (issue 39 item 3): the Nexmark queries of flink_sql.py on a generated source
that is not Flink's bottleneck, and the source alone.

Runs under the separate Flink venv, never imports our engine, and prints one JSON line::

    .flink-venv/bin/python bench/nexmark/flink_gen.py --query q5 --events 6000000 \\
        [--source-columns event_type,date_time,auction] [--backend hashmap|rocksdb] \\
        [--interval-s 10] [--sequence from_sequence|datagen]

The events are computed in SQL from a sequence of event ids, as bench/nexmark/generator.py
computes them from the id (which follows the Nexmark generator): ``id % 50`` is 0 for a
person, 1-3 for an auction, else a bid (2% / 6% / 92%); person and auction ids are the last
ones created before the event (``id / 50`` and the auction count); a bid's auction is hot
(the last auction id rounded down to 100s) with probability 1/2, else one of the ~100 in
flight (+10 ahead); its bidder is hot with probability 3/4, else one of the 1,000 most
recent people (+10 ahead); a seller likewise; prices ``round(10^(6u) * 100)``; half of the
bids on 4 hot channels, the rest on ``channel-0`` .. ``channel-9999`` with one URL each (9 in
10 with ``&channel_id=``); event time ``base + id * 1e6 / rate / 1000`` ms (in order);
``extra`` padded towards 100 / 200 / 500 bytes (bid / person / auction) +-20%.

What differs from generator.py (and from the CSV the other Flink column reads): a random
draw is the top bits of ``id * M_k`` (a multiplicative hash, one odd 64-bit ``M_k`` per
draw: SQL has no shifts or XOR) instead of SplitMix64, so the values differ, not their
distributions; strings (names' parts, e-mails, item names, descriptions, URL words,
``extra``) are slices of fixed pools at hashed offsets instead of generated letters; the
``extra`` padding is sized from each kind's average field lengths, not from the event's;
a channel's ``channel_id`` is a hash of its number (generator.py: Java's bit reversal).

Source: ``--sequence from_sequence`` (default): ``NumberSequenceSource`` (FLIP-27
``NumberSequenceSource``: splits, no per-value state) into ``from_data_stream`` with the
computed columns and the watermark (``date_time - 4 s``) in its schema; ``datagen``: the SQL
``datagen`` connector's ``sequence`` kind (its legacy ``SequenceGenerator`` keeps the values
still to emit in a deque and snapshots them into operator state: a cost of that source, not
of the query). The query and the settings are flink_sql.py's (mini-batch, split distinct,
exactly-once checkpoints); the sink ``blackhole``. ``--source-columns``: then, in the same
JVM, ``SELECT <columns> FROM events`` into ``blackhole`` (the columns the query reads: what
generating its input costs). Rates are events / net runtime; ``cpu_s`` is the JVM's CPU time
during the job (every thread: JIT and GC included), robust to a loaded machine.
A warm-up job of 100,000 events runs first in the same JVM; ``net_runtime_s`` is the
measured job's net runtime as the cluster reports it (as flink_sql.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from flink_sql import (  # noqa: E402
    Q10_SINK,
    QUERIES,
    job_settings,
    register_views,
)

BASE_TIME_MS = 1_767_225_600_000  # generator.py's DEFAULT_BASE_TIME_MS
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
FIRST_NAMES = (
    "Peter",
    "Paul",
    "Luke",
    "John",
    "Saul",
    "Vicky",
    "Kate",
    "Julie",
    "Sarah",
    "Deiter",
    "Walter",
)
LAST_NAMES = (
    "Shultz",
    "Abrams",
    "Spencer",
    "White",
    "Bartels",
    "Walton",
    "Smith",
    "Jones",
    "Noris",
)
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
POOL_LEN = 2048


def _pool(seed: int, spaces: bool) -> str:
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(
        " " if spaces and rnd.random() < 1 / 13 else rnd.choice(letters) for _ in range(POOL_LEN)
    )


#: letters (extra, URL words) and words with spaces (names, descriptions): SQL literals
LETTERS, WORDS = _pool(1, False), _pool(2, True)


def _multiplier(k: int) -> int:
    """The odd 64-bit constant of draw ``k``, as a signed BIGINT literal."""
    m = random.Random(1000 + k).getrandbits(64) | 1
    return m - (1 << 64) if m >= 1 << 63 else m


def columns_sql(id_col: str, rate: float) -> dict[str, str]:
    """Every column of the CSV table (flink_sql.COLUMNS) as a SQL expression of ``id_col``."""
    i = id_col
    off = f"MOD({i}, 50)"

    def draw(k: int) -> str:  # uniform in 0 .. 2^32
        return f"ABS(({i} * ({_multiplier(k)})) / 2147483648)"

    def uint(k: int, n: str | int) -> str:
        return f"MOD({draw(k)}, {n})"

    def unit(k: int) -> str:
        return f"(CAST({draw(k)} AS DOUBLE) / 4294967297E0)"

    def price(k: int) -> str:
        return f"CAST(ROUND(POWER(10E0, 6E0 * {unit(k)}) * 100E0) AS BIGINT)"

    def pick(k: int, values) -> str:
        whens = " ".join(f"WHEN {j} THEN '{v}'" for j, v in enumerate(values[:-1]))
        return f"CASE {uint(k, len(values))} {whens} ELSE '{values[-1]}' END"

    def slice_(pool: str, k: int, length: str) -> str:
        return f"SUBSTRING('{pool}', 1 + {uint(k, POOL_LEN - 1024)}, {length})"

    def padding(k: int, want: int) -> str:  # generator.py's _extra for an average size
        delta = round(want * 0.2)
        return slice_(LETTERS, k, f"{want - delta} + {uint(k + 1, 2 * delta)}")

    delay_us = 1e6 / rate
    if delay_us == int(delay_us):

        def ts_ms(e: str) -> str:
            return f"({BASE_TIME_MS} + ({e}) * {int(delay_us)} / 1000)"
    else:

        def ts_ms(e: str) -> str:
            return f"({BASE_TIME_MS} + CAST(({e}) * {delay_us!r} AS BIGINT) / 1000)"

    def ts(ms: str) -> str:
        return f"CAST(TO_TIMESTAMP_LTZ({ms}, 3) AS TIMESTAMP(3))"

    last_person = f"({i} / 50)"
    last_auction = (
        f"(CASE WHEN {off} = 0 THEN ({i} / 50 - 1) * 3 + 2 WHEN {off} >= 4 "
        f"THEN ({i} / 50) * 3 + 2 ELSE ({i} / 50) * 3 + {off} - 1 END)"
    )

    def recent_person(k: int) -> str:
        active = f"LEAST({last_person} + 1, 1000)"
        return f"({last_person} + 1 - {active} + {uint(k, f'{active} + 10')})"

    def kind(which: str, expr: str) -> str:
        cond = {"person": f"{off} = 0", "auction": f"{off} BETWEEN 1 AND 3", "bid": f"{off} >= 4"}[
            which
        ]
        return f"CASE WHEN {cond} THEN {expr} END"

    hot_bit = "MOD({d}, {n}) > 0"
    low = f"GREATEST({last_auction} - 100, 0)"
    auction = (
        f"CASE WHEN {hot_bit.format(d=draw(1), n=2)} THEN {last_auction} / 100 * 100 "
        f"ELSE {low} + {uint(2, f'{last_auction} - {low} + 11')} END + 1000"
    )
    bidder = (
        f"CASE WHEN {hot_bit.format(d=draw(3), n=4)} THEN {last_person} / 100 * 100 + 1 "
        f"ELSE {recent_person(4)} END + 1000"
    )
    hot_channel = hot_bit.format(d=draw(6), n=2)
    cold = uint(8, 10_000)
    channel = (
        f"CASE WHEN {hot_channel} THEN {pick(7, HOT_CHANNELS)} "
        f"ELSE CONCAT('channel-', CAST({cold} AS STRING)) END"
    )

    def word(salt: int, length: int) -> str:
        return f"SUBSTRING('{LETTERS}', 1 + MOD({cold} * {salt}, 1500), {length})"

    hot_url = (
        "CONCAT('https://www.nexmark.com/', "
        + pick(7, ["hot/a", "hot/b", "hot/c", "hot/d"])
        + ", '/item.htm?query=1')"
    )
    cold_url = (
        f"CONCAT('https://www.nexmark.com/', {word(7, 4)}, '/', {word(13, 3)}, '/', "
        f"{word(17, 4)}, '/item.htm?query=1', CASE WHEN MOD({cold}, 10) > 0 THEN "
        f"CONCAT('&channel_id=', CAST(MOD(ABS({cold} * {_multiplier(99)}), 2147483647)"
        " AS STRING)) ELSE '' END)"
    )
    url = f"CASE WHEN {hot_channel} THEN {hot_url} ELSE {cold_url} END"
    card = ", ' ', ".join(f"LPAD(CAST({uint(20 + j, 10_000)} AS STRING), 4, '0')" for j in range(4))
    email = (
        f"CONCAT({slice_(WORDS.replace(' ', 'x'), 24, f'3 + {uint(25, 4)}')}, '@', "
        f"{slice_(LETTERS, 26, f'3 + {uint(27, 2)}')}, '.com')"
    )
    horizon = f"({ts_ms(f'{i} + 1666')} - {ts_ms(i)})"
    expires = ts(f"{ts_ms(i)} + 1 + {uint(30, f'GREATEST(2 * {horizon}, 1)')}")
    seller = (
        f"CASE WHEN {hot_bit.format(d=draw(31), n=4)} THEN {last_person} / 100 * 100 "
        f"ELSE {recent_person(32)} END + 1000"
    )
    return {
        "event_type": f"CAST(CASE WHEN {off} = 0 THEN 0 WHEN {off} < 4 THEN 1 ELSE 2 END AS INT)",
        "date_time": ts(ts_ms(i)),
        "person_id": kind("person", f"{last_person} + 1000"),
        "person_name": kind(
            "person", f"CONCAT({pick(40, FIRST_NAMES)}, ' ', {pick(41, LAST_NAMES)})"
        ),
        "person_email": kind("person", email),
        "person_credit_card": kind("person", f"CONCAT({card})"),
        "person_city": kind("person", pick(42, US_CITIES)),
        "person_state": kind("person", pick(43, US_STATES)),
        "auction_id": kind("auction", f"{last_auction} + 1000"),
        "auction_item_name": kind("auction", f"TRIM({slice_(WORDS, 50, f'3 + {uint(51, 17)}')})"),
        "auction_description": kind("auction", f"TRIM({slice_(WORDS, 52, f'3 + {uint(53, 97)}')})"),
        "auction_initial_bid": kind("auction", price(54)),
        "auction_reserve": kind("auction", f"{price(54)} + {price(55)}"),
        "auction_expires": kind("auction", expires),
        "auction_seller": kind("auction", seller),
        "auction_category": kind("auction", f"10 + {uint(56, 5)}"),
        "auction": kind("bid", auction),
        "bidder": kind("bid", bidder),
        "price": kind("bid", price(5)),
        "channel": kind("bid", channel),
        "url": kind("bid", url),
        "extra": (
            f"CASE WHEN {off} = 0 THEN {padding(60, 141)} WHEN {off} < 4 "
            f"THEN {padding(62, 390)} ELSE {padding(64, 68)} END"
        ),
    }


#: the CSV table's column types (flink_sql.COLUMNS)
TYPES = {
    "event_type": "INT",
    "date_time": "TIMESTAMP(3)",
    "person_id": "BIGINT",
    "auction_id": "BIGINT",
    "auction_initial_bid": "BIGINT",
    "auction_reserve": "BIGINT",
    "auction_expires": "TIMESTAMP(3)",
    "auction_seller": "BIGINT",
    "auction_category": "BIGINT",
    "auction": "BIGINT",
    "bidder": "BIGINT",
    "price": "BIGINT",
}


def _cast(name: str, expr: str) -> str:
    return f"CAST({expr} AS {TYPES.get(name, 'STRING')})"


def create_events(env, t_env, events: int, *, rate: float, sequence: str) -> None:
    """The ``events`` table (a view for ``from_sequence``) of ``events`` generated events."""
    if sequence == "datagen":
        cols = ",\n    ".join(f"`{n}` AS {_cast(n, e)}" for n, e in columns_sql("id", rate).items())
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE events (id BIGINT,\n    {cols},\n"
            "    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND\n"
            ") WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence', "
            f"'fields.id.start' = '0', 'fields.id.end' = '{events - 1}', "
            "'rows-per-second' = '1000000000000')"
        )
        return
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.table import DataTypes, Schema

    builder = Schema.new_builder().column("f0", DataTypes.BIGINT())
    for name, expr in columns_sql("f0", rate).items():
        builder = builder.column_by_expression(name, _cast(name, expr))
    schema = builder.watermark("date_time", "date_time - INTERVAL '4' SECOND").build()
    ids = env.from_source(
        NumberSequenceSource(0, events - 1), WatermarkStrategy.no_watermarks(), "event ids"
    )
    table = t_env.from_data_stream(ids, schema)
    t_env.create_temporary_view("events", table)


def run(
    query: str,
    events: int,
    *,
    backend: str,
    interval_s: float,
    checkpoints: str,
    rate: float,
    sequence: str,
    source_columns: list[str] | None,
    warmup: int,
) -> dict:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    t0 = time.monotonic()
    settings = {
        **job_settings(backend=backend, interval_s=interval_s, parallelism=1,
                       checkpoints=checkpoints),
        "table.local-time-zone": "UTC",
    }
    conf = Configuration()
    for k, v in settings.items():
        conf.set_string(k, v)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    t_env = StreamTableEnvironment.create(env)
    for k, v in settings.items():
        t_env.get_config().set(k, v)
    create_events(env, t_env, warmup or events, rate=rate, sequence=sequence)
    register_views(t_env, query, checkpoints)
    select = QUERIES[query]
    ddl_cols = _ddl_columns(t_env.sql_query(select).get_resolved_schema().get_columns())
    if query == "q10":
        t_env.execute_sql(Q10_SINK.format(columns=ddl_cols, path=os.path.join(checkpoints, "out")))
    else:
        t_env.execute_sql(f"CREATE TABLE sink ({ddl_cols}) WITH ('connector' = 'blackhole')")
    warm_s = None
    if warmup:
        w = t_env.execute_sql(f"INSERT INTO sink {select}")
        w.wait()
        warm_s = w.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
    out = {
        "query": query,
        "events": events,
        "sequence": sequence,
        "setup_s": time.monotonic() - t0,
        "warmup_net_runtime_s": warm_s,
        "settings": settings,
        "jvm_pid": _jvm_pid(),
    }
    jobs = [("", select)]
    if source_columns:  # then the source alone, the columns the query reads
        jobs.append(
            ("source_", "SELECT " + ", ".join(f"`{c}`" for c in source_columns) + " FROM events")
        )
        out["source_columns"] = source_columns
    for prefix, sql in jobs:
        if warmup or prefix:
            if sequence == "datagen":
                t_env.execute_sql("DROP TEMPORARY TABLE events")
            else:
                t_env.drop_temporary_view("events")
            create_events(env, t_env, events, rate=rate, sequence=sequence)
        if prefix:
            schema = t_env.sql_query(sql).get_resolved_schema().get_columns()
            t_env.execute_sql(
                f"CREATE TABLE {prefix}sink ({_ddl_columns(schema)}) "
                "WITH ('connector' = 'blackhole')"
            )
        cpu0, t1 = _cpu_s(out["jvm_pid"]), time.monotonic()
        result = t_env.execute_sql(f"INSERT INTO {prefix}sink {sql}")
        result.wait()
        t2, cpu1 = time.monotonic(), _cpu_s(out["jvm_pid"])
        net_s = result.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
        out.update(
            {
                f"{prefix}job_s": t2 - t1,
                f"{prefix}net_runtime_s": net_s,
                f"{prefix}rate": events / net_s,
                f"{prefix}cpu_s": None if cpu0 is None else cpu1 - cpu0,
                f"{prefix}events_per_cpu_s": None
                if cpu0 is None or cpu1 <= cpu0
                else events / (cpu1 - cpu0),
            }
        )
    return out


def _ddl_columns(cols) -> str:
    return ", ".join(
        f"`{c.get_name()}` "
        + str(c._j_column.getDataType().toString())
        .replace(" *ROWTIME*", "")
        .replace(" *PROCTIME*", "")
        .replace(" NOT NULL", "")
        for c in cols
    )


def _jvm_pid() -> int | None:
    """The JVM PyFlink started (a child of this process)."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if fields[1] == me and b"java" in cmd:
            return int(pid)
    return None


def _cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` (every thread: JIT and GC included)."""
    if pid is None:
        return None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True, choices=sorted(QUERIES))
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument(
        "--source-columns",
        default="",
        help="after the query, a job reading only these columns of the generated "
        "events into blackhole (the source alone); '' for none",
    )
    ap.add_argument("--backend", default="hashmap", choices=("hashmap", "rocksdb"))
    ap.add_argument("--interval-s", type=float, default=10.0)
    ap.add_argument(
        "--event-rate", type=float, default=1_000_000, help="events per second of event time"
    )
    ap.add_argument("--sequence", default="from_sequence", choices=("from_sequence", "datagen"))
    ap.add_argument("--warmup-events", type=int, default=100_000)
    ap.add_argument("--print-ddl", action="store_true")
    args = ap.parse_args(argv)
    if args.print_ddl:
        for n, e in columns_sql("id", args.event_rate).items():
            print(f"{n}: {_cast(n, e)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="flink-gen-") as chk:
        out = run(
            args.query,
            args.events,
            backend=args.backend,
            interval_s=args.interval_s,
            checkpoints=chk,
            rate=args.event_rate,
            sequence=args.sequence,
            source_columns=[c for c in args.source_columns.split(",") if c],
            warmup=args.warmup_events,
        )
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
