"""Flink 2.x (PyFlink SQL) on the Nexmark events: nexmark-flink's DDL and queries, over the
CSV copy of our generated events (the pip package ships no Parquet format jar).

Runs under the separate Flink venv (``/work/flink-venv/bin/python``), never imports our
engine, and prints one JSON line::

    /work/flink-venv/bin/python bench/nexmark/flink_sql.py --query q5 --csv DIR \\
        [--backend hashmap|rocksdb] [--interval-s 10] [--parallelism 1]

Settings are those of nexmark-flink's own benchmark configuration: mini-batch on (2 s
allowed latency, 50,000 rows), split distinct aggregation, exactly-once checkpoints,
incremental RocksDB; the watermark is ``dateTime - 4 s`` as in its DDL. Sinks are
``blackhole`` (q10: ``filesystem``, CSV, partitioned, under the temporary directory). The
job is bounded (the files), so it ends when the input does; ``net_runtime_s`` is the job's
net runtime as the cluster reports it (submission to the end: task deployment and the final
checkpoint included; the JVM's start and planning not). With ``--warmup-csv`` the same job
first runs on those files in the same JVM, and only the second run is measured: a
long-running Flink cluster's JIT is warm, and a short run must not charge Flink for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

COLUMNS = """
    event_type INT, date_time TIMESTAMP(3),
    person_id BIGINT, person_name STRING, person_email STRING, person_credit_card STRING,
    person_city STRING, person_state STRING,
    auction_id BIGINT, auction_item_name STRING, auction_description STRING,
    auction_initial_bid BIGINT, auction_reserve BIGINT, auction_expires TIMESTAMP(3),
    auction_seller BIGINT, auction_category BIGINT,
    auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, extra STRING"""

DDL = """
CREATE TABLE events ({columns},
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv',
        'csv.null-literal' = '', 'csv.ignore-parse-errors' = 'false')
"""

BID_VIEW = """
CREATE VIEW bid AS SELECT auction, bidder, price, channel, url, date_time AS `dateTime`, extra
FROM events WHERE event_type = 2
"""

PERSON_VIEW = """
CREATE VIEW person AS SELECT person_id AS id, person_name AS name, person_email AS emailAddress,
    person_credit_card AS creditCard, person_city AS city, person_state AS state,
    date_time AS `dateTime`, extra FROM events WHERE event_type = 0
"""

AUCTION_VIEW = """
CREATE VIEW auction AS SELECT auction_id AS id, auction_item_name AS itemName,
    auction_description AS description, auction_initial_bid AS initialBid,
    auction_reserve AS reserve, date_time AS `dateTime`, auction_expires AS expires,
    auction_seller AS seller, auction_category AS category, extra
FROM events WHERE event_type = 1
"""

#: q13's side input (key i -> 'i', nexmark's side_input file). The pip package's filesystem
#: connector is no lookup source (``FOR SYSTEM_TIME AS OF`` wants a versioned table with a
#: primary key), so q13 runs as a regular join with the bounded table: Flink keeps both sides.
SIDE_INPUT = """
CREATE TABLE side_input (`key` BIGINT, `value` STRING)
WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')
"""

RANKS = """
    count(*) AS total_bids,
    count(*) filter (where price < 10000) AS rank1_bids,
    count(*) filter (where price >= 10000 and price < 1000000) AS rank2_bids,
    count(*) filter (where price >= 1000000) AS rank3_bids"""
DISTINCT = RANKS + """,
    count(distinct bidder) AS total_bidders,
    count(distinct bidder) filter (where price < 10000) AS rank1_bidders,
    count(distinct bidder) filter (where price >= 10000 and price < 1000000) AS rank2_bidders,
    count(distinct bidder) filter (where price >= 1000000) AS rank3_bidders,
    count(distinct auction) AS total_auctions,
    count(distinct auction) filter (where price < 10000) AS rank1_auctions,
    count(distinct auction) filter (where price >= 10000 and price < 1000000) AS rank2_auctions,
    count(distinct auction) filter (where price >= 1000000) AS rank3_auctions"""

HOP = ("TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, "
       "INTERVAL '10' SECOND))")

#: q10's sink: nexmark-flink's (filesystem, CSV, partitioned by dt and hm, a partition
#: committed with a _SUCCESS file once the watermark passes its minute + 1 min), written under
#: the run's temporary directory
Q10_SINK = """
CREATE TABLE sink ({columns}) PARTITIONED BY (dt, hm) WITH (
    'connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'csv',
    'sink.partition-commit.trigger' = 'partition-time',
    'sink.partition-commit.delay' = '1 min',
    'sink.partition-commit.policy.kind' = 'success-file',
    'partition.time-extractor.timestamp-pattern' = '$dt $hm:00',
    'sink.rolling-policy.rollover-interval' = '1min',
    'sink.rolling-policy.check-interval' = '1min')
"""

#: the SELECT of each query (nexmark-flink's semantics, our column names)
QUERIES = {
    "q0": "SELECT auction, bidder, price, `dateTime`, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, `dateTime`, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
    "q3": """
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')""",
    "q4": """
SELECT Q.category, AVG(Q.final) AS `avg` FROM (
    SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
    GROUP BY A.id, A.category) Q
GROUP BY Q.category""",
    "q8": """
SELECT P.id, P.name, P.starttime FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
    GROUP BY id, name, window_start, window_end) P
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
    GROUP BY seller, window_start, window_end) A
ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime""",
    "q9": """
SELECT id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category,
    extra, auction, bidder, price, bid_dateTime, bid_extra FROM (
    SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime,
        B.extra AS bid_extra,
        ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
    FROM auction A, bid B
    WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires)
WHERE rownum <= 1""",
    "q13": """
SELECT B.auction, B.bidder, B.price, B.`dateTime`, S.`value`
FROM bid B JOIN side_input S ON MOD(B.auction, 10000) = S.`key`""",
    "q20": """
SELECT auction, bidder, price, channel, url, B.`dateTime`, B.extra, itemName, description,
    initialBid, reserve, A.`dateTime` AS auction_dateTime, expires, seller, category,
    A.extra AS auction_extra
FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id WHERE A.category = 10""",
    "q5": f"""
SELECT AuctionBids.auction, AuctionBids.num FROM (
    SELECT auction, count(*) AS num, window_start AS starttime, window_end AS endtime
    FROM {HOP} GROUP BY auction, window_start, window_end) AS AuctionBids
JOIN (
    SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM (
        SELECT count(*) AS num, window_start AS starttime, window_end AS endtime
        FROM {HOP} GROUP BY auction, window_start, window_end) AS CountBids
    GROUP BY CountBids.starttime, CountBids.endtime) AS MaxBids
ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime
   AND AuctionBids.num >= MaxBids.maxn""",
    "q7": """
SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra FROM bid B
JOIN (SELECT MAX(price) AS maxprice, window_end AS `dateTime`
      FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
      GROUP BY window_start, window_end) B1
ON B.price = B1.maxprice
WHERE B.`dateTime` BETWEEN B1.`dateTime` - INTERVAL '10' SECOND AND B1.`dateTime`""",
    "q11": """
SELECT B.bidder, count(*) AS bid_count,
       SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) AS starttime,
       SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) AS endtime
FROM bid B GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)""",
    "q12": """
SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TABLE(TUMBLE(TABLE B12, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
GROUP BY bidder, window_start, window_end""",
    "q10": """
SELECT auction, bidder, price, `dateTime`, extra, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS dt,
    DATE_FORMAT(`dateTime`, 'HH:mm') AS hm
FROM bid""",
    "q14": """
SELECT auction, bidder, 0.908 * price AS price,
    CASE WHEN HOUR(`dateTime`) >= 8 AND HOUR(`dateTime`) <= 18 THEN 'dayTime'
         WHEN HOUR(`dateTime`) <= 6 OR HOUR(`dateTime`) >= 20 THEN 'nightTime'
         ELSE 'otherTime' END AS bidTimeType,
    `dateTime`, extra,
    CAST(CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', '')) AS BIGINT) AS c_counts
FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
    "q15": f"""
SELECT DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`, {DISTINCT}
FROM bid GROUP BY DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    "q16": f"""
SELECT channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,
       max(DATE_FORMAT(`dateTime`, 'HH:mm')) AS `minute`, {DISTINCT}
FROM bid GROUP BY channel, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    "q17": f"""
SELECT auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`, {RANKS},
       min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price,
       sum(price) AS sum_price
FROM bid GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')""",
    "q18": """
SELECT auction, bidder, price, channel, url, `dateTime`, extra FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY `dateTime` DESC) AS rn
    FROM bid) WHERE rn <= 1""",
    "q19": """
SELECT * FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
    FROM bid) WHERE rank_number <= 10""",
    "q21": """
SELECT auction, bidder, price, channel,
    CASE WHEN lower(channel) = 'apple' THEN '0' WHEN lower(channel) = 'google' THEN '1'
         WHEN lower(channel) = 'facebook' THEN '2' WHEN lower(channel) = 'baidu' THEN '3'
         ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id
FROM bid WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
            OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    "q22": """
SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1,
       SPLIT_INDEX(url, '/', 4) AS dir2, SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid""",
}


def job_settings(*, backend: str, interval_s: float, parallelism: int,
                 checkpoints: str) -> dict[str, str]:
    """The Flink settings of every Nexmark job (flink_sql.py's and flink_gen.py's)."""
    return {
        "parallelism.default": str(parallelism),
        "execution.checkpointing.interval": f"{int(interval_s * 1000)} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": "file://" + checkpoints,
        "state.backend.type": backend,
        "state.backend.incremental": "true",
        "table.exec.mini-batch.enabled": "true",
        "table.exec.mini-batch.allow-latency": "2 s",
        "table.exec.mini-batch.size": "50000",
        "table.optimizer.distinct-agg.split.enabled": "true",
    }


def register_views(t_env, query: str, checkpoints: str) -> None:
    """The bid/person/auction views over ``events``, and what ``query`` needs besides (q13's
    side input table, q12's processing-time view)."""
    t_env.execute_sql(BID_VIEW)
    t_env.execute_sql(PERSON_VIEW)
    t_env.execute_sql(AUCTION_VIEW)
    if query == "q13":
        side = os.path.join(checkpoints, "side_input")
        os.makedirs(side)
        with open(os.path.join(side, "side_input.csv"), "w") as f:
            f.writelines(f"{i},{i}\n" for i in range(10_000))
        t_env.execute_sql(SIDE_INPUT.format(path=side))
    if query == "q12":
        t_env.execute_sql("CREATE VIEW B12 AS SELECT *, PROCTIME() AS p_time FROM bid")


def run(query: str, path: str, *, backend: str, interval_s: float, parallelism: int,
        checkpoints: str, warmup: str | None = None) -> dict:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    t0 = time.monotonic()
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    settings = job_settings(backend=backend, interval_s=interval_s, parallelism=parallelism,
                            checkpoints=checkpoints)
    for k, v in settings.items():
        conf.set(k, v)
    env.execute_sql(DDL.format(columns=COLUMNS, path=warmup or path))
    register_views(env, query, checkpoints)
    select = QUERIES[query]

    cols = env.sql_query(select).get_resolved_schema().get_columns()
    ddl_cols = ", ".join(
        f"`{c.get_name()}` " + str(c._j_column.getDataType().toString())
        .replace(" *ROWTIME*", "").replace(" *PROCTIME*", "").replace(" NOT NULL", "")
        for c in cols)
    if query == "q10":
        env.execute_sql(Q10_SINK.format(columns=ddl_cols, path=os.path.join(checkpoints, "out")))
    else:
        env.execute_sql(f"CREATE TABLE sink ({ddl_cols}) WITH ('connector' = 'blackhole')")
    warm_s = None
    if warmup:  # the same job on a few events first, in this JVM: the JIT is warm after it
        w = env.execute_sql(f"INSERT INTO sink {select}")
        w.wait()
        warm_s = w.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
        env.execute_sql("DROP TABLE events")  # the views read it by name
        env.execute_sql(DDL.format(columns=COLUMNS, path=path))
    t1 = time.monotonic()
    result = env.execute_sql(f"INSERT INTO sink {select}")
    result.wait()
    t2 = time.monotonic()
    # the cluster's own measure of the job, submission to end (no JVM start, no planning)
    net_ms = result.get_job_client().get_job_execution_result().result().get_net_runtime()
    return {"query": query, "setup_s": t1 - t0, "job_s": t2 - t1, "net_runtime_s": net_ms / 1000,
            "warmup_net_runtime_s": warm_s, "settings": settings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--query", required=True, choices=sorted(QUERIES))
    ap.add_argument("--csv", required=True, help="directory of the events as CSV")
    ap.add_argument("--backend", default="rocksdb", choices=("hashmap", "rocksdb"))
    ap.add_argument("--interval-s", type=float, default=10.0)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--warmup-csv", help="run the job on these files first, in the same JVM, "
                                         "and measure only the second run")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="flink-chk-") as chk:
        out = run(args.query, args.csv, backend=args.backend, interval_s=args.interval_s,
                  parallelism=args.parallelism, checkpoints=chk, warmup=args.warmup_csv)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
