"""The Nexmark reference of the chaos matrix: each query as DuckDB SQL, written from the
Nexmark query definitions (the Nexmark paper and nexmark-flink's ``queries/q*.sql``), not
from our engine's code, over the same generated events (bench/nexmark/generator.py, the
catalogue's configuration).

Three views as in nexmark-flink's DDL: ``person``, ``auction``, ``bid`` (Nexmark's column
names: ``dateTime``, ``itemName``, ...). Each query returns the columns of our output
(times as epoch milliseconds), so the committed rows compare one to one. Where a query's
text needs a reading, it is said at the query:

* q5, q7, q8, q11: the windows of the text (HOP 10 s / 2 s, TUMBLE 10 s, SESSION 10 s)
  written out as arithmetic on epoch milliseconds (a window is ``[start, end)``);
* q6: the original Nexmark query (per seller, the average selling price of its last 10
  closed auctions, one row per close, in expiry order), which nexmark-flink does not run;
* q12: processing-time windows make the rows depend on wall-clock time; only the number
  of bids per bidder (the sum over its windows) is deterministic: that is compared;
* q13: the side input is nexmark's 10,000-row table ``key -> str(key)``.
"""

from __future__ import annotations

import functools

import numpy as np

_VIEWS = """
CREATE VIEW person AS SELECT person_id AS id, person_name AS name,
    person_email AS emailAddress, person_credit_card AS creditCard, person_city AS city,
    person_state AS state, date_time AS dateTime, extra FROM events WHERE event_type = 0;
CREATE VIEW auction AS SELECT auction_id AS id, auction_item_name AS itemName,
    auction_description AS description, auction_initial_bid AS initialBid,
    auction_reserve AS reserve, date_time AS dateTime, auction_expires AS expires,
    auction_seller AS seller, auction_category AS category, extra
    FROM events WHERE event_type = 1;
CREATE VIEW bid AS SELECT auction, bidder, price, channel, url, date_time AS dateTime, extra
    FROM events WHERE event_type = 2;
CREATE TABLE side_input AS SELECT range AS key, CAST(range AS VARCHAR) AS value
    FROM range(10000);
"""

_WINNING = """
SELECT * FROM (
  SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime, B.extra AS bid_extra,
         ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC) AS rownum
  FROM auction A, bid B
  WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
WHERE rownum <= 1
"""

_RANKS = """
  count(*) FILTER (WHERE price < 10000) AS rank1_bids,
  count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
  count(*) FILTER (WHERE price >= 1000000) AS rank3_bids"""

_DISTINCTS = """
  count(DISTINCT bidder) AS total_bidders,
  count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
  count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
  count(DISTINCT auction) AS total_auctions,
  count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
  count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions"""

SQL: dict[str, str] = {
    # q0: pass through
    "q0": "SELECT auction, bidder, price, epoch_ms(dateTime) AS date_time, extra FROM bid",
    # q1: currency conversion (dollars to euros)
    "q1": """SELECT auction, bidder, CAST(price AS DOUBLE) * 0.908::DOUBLE AS price,
                    epoch_ms(dateTime) AS date_time, extra FROM bid""",
    # q2: selection
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # q3: local item suggestion
    "q3": """SELECT P.name, P.city, P.state, A.id FROM auction AS A
             INNER JOIN person AS P ON A.seller = P.id
             WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')""",
    # q4: average price for a category (of the winning bids)
    "q4": """SELECT Q.category, AVG(Q.final) AS avg FROM (
               SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
               WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
               GROUP BY A.id, A.category) Q
             GROUP BY Q.category""",
    # q5: hot items: per sliding window (10 s, every 2 s) the auctions with the most bids
    "q5": """WITH hops AS (
               SELECT auction, epoch_ms(dateTime) // 2000 * 2000 - k * 2000 AS starttime
               FROM bid, range(5) AS t(k)),
             counts AS (SELECT auction, starttime + 10000 AS window_end, count(*) AS num
                        FROM hops GROUP BY auction, starttime),
             maxes AS (SELECT window_end, max(num) AS maxn FROM counts GROUP BY window_end)
             SELECT c.auction, c.num, c.window_end FROM counts c JOIN maxes m
             ON c.window_end = m.window_end AND c.num >= m.maxn""",
    # q6: average selling price by seller (last 10 closed auctions)
    "q6": f"""SELECT seller, id AS auction, epoch_ms(expires) AS expires,
                     AVG(price) OVER (PARTITION BY seller ORDER BY expires, id
                                      ROWS BETWEEN 9 PRECEDING AND CURRENT ROW) AS avg
              FROM ({_WINNING})""",
    # q7: highest bid per tumbling 10 s window
    "q7": """WITH b AS (SELECT *, epoch_ms(dateTime) AS ts, epoch_ms(dateTime) // 10000 AS w
                        FROM bid),
             m AS (SELECT w, MAX(price) AS maxprice FROM b GROUP BY w)
             SELECT b.auction, b.bidder, b.price, b.ts AS date_time, b.extra,
                    (b.w + 1) * 10000 AS window_end
             FROM b JOIN m ON b.w = m.w AND b.price = m.maxprice""",
    # q8: monitor new users: a person who opened an auction in the same 10 s window
    "q8": """WITH P AS (SELECT id, name, epoch_ms(dateTime) // 10000 * 10000 AS starttime
                        FROM person GROUP BY ALL),
             A AS (SELECT seller, epoch_ms(dateTime) // 10000 * 10000 AS starttime
                   FROM auction GROUP BY ALL)
             SELECT P.id, P.name, P.starttime FROM P JOIN A
             ON P.id = A.seller AND P.starttime = A.starttime""",
    # q9: winning bids
    "q9": f"""SELECT id, itemName AS item_name, description, initialBid AS initial_bid, reserve,
                     epoch_ms(dateTime) AS date_time, epoch_ms(expires) AS expires, seller,
                     category, extra, auction, bidder, price,
                     epoch_ms(bid_dateTime) AS bid_date_time, bid_extra
              FROM ({_WINNING})""",
    # q10: log to file system, partitioned by day and minute
    "q10": """SELECT auction, bidder, price, epoch_ms(dateTime) AS date_time, extra,
                     strftime(dateTime, '%Y-%m-%d') AS dt, strftime(dateTime, '%H:%M') AS hm
              FROM bid""",
    # q11: user sessions (gap 10 s)
    "q11": """WITH b AS (SELECT bidder, epoch_ms(dateTime) AS ts FROM bid),
              s AS (SELECT bidder, ts, CASE WHEN ts - lag(ts) OVER (PARTITION BY bidder
                                                                   ORDER BY ts) < 10000
                                            THEN 0 ELSE 1 END AS opens FROM b),
              g AS (SELECT bidder, ts, sum(opens) OVER (PARTITION BY bidder ORDER BY ts
                                                        ROWS UNBOUNDED PRECEDING) AS session
                    FROM s)
              SELECT bidder, count(*) AS bid_count, min(ts) AS window_start,
                     max(ts) + 10000 AS window_end FROM g GROUP BY bidder, session""",
    # q12: bids per bidder in processing-time windows: the per-bidder total
    "q12": "SELECT bidder, count(*) AS bid_count FROM bid GROUP BY bidder",
    # q13: bounded side input join
    "q13": """SELECT B.auction, B.bidder, B.price, epoch_ms(B.dateTime) AS date_time, S.value
              FROM bid B JOIN side_input S ON B.auction % 10000 = S.key""",
    # q14: calculation (a filter on the converted price, the time of day, count of 'c')
    "q14": """SELECT auction, bidder, CAST(price AS DOUBLE) * 0.908::DOUBLE AS price,
                     CASE WHEN hour(dateTime) >= 8 AND hour(dateTime) <= 18 THEN 'dayTime'
                          WHEN hour(dateTime) <= 6 OR hour(dateTime) >= 20 THEN 'nightTime'
                          ELSE 'otherTime' END AS bidTimeType,
                     epoch_ms(dateTime) AS date_time, extra,
                     length(extra) - length(replace(extra, 'c', '')) AS c_counts
              FROM bid
              WHERE CAST(price AS DOUBLE) * 0.908::DOUBLE > 1000000
                AND CAST(price AS DOUBLE) * 0.908::DOUBLE < 50000000""",
    # q15: bidding statistics per day
    "q15": f"""SELECT strftime(dateTime, '%Y-%m-%d') AS key, count(*) AS total_bids, {_RANKS},
                      {_DISTINCTS}
               FROM bid GROUP BY strftime(dateTime, '%Y-%m-%d')""",
    # q16: channel statistics per day (our key: channel|day)
    "q16": f"""SELECT channel || '|' || strftime(dateTime, '%Y-%m-%d') AS key,
                      max(strftime(dateTime, '%H:%M')) AS minute,
                      count(*) AS total_bids, {_RANKS}, {_DISTINCTS}
               FROM bid GROUP BY channel, strftime(dateTime, '%Y-%m-%d')""",
    # q17: auction statistics per day
    "q17": f"""SELECT auction, strftime(dateTime, '%Y-%m-%d') AS day, count(*) AS total_bids,
                      {_RANKS}, min(price) AS min_price, max(price) AS max_price,
                      avg(price) AS avg_price, sum(price) AS sum_price
               FROM bid GROUP BY auction, strftime(dateTime, '%Y-%m-%d')""",
    # q18: the last bid of each (bidder, auction)
    "q18": """SELECT auction, bidder, price, channel, url, epoch_ms(dateTime) AS date_time,
                     extra
              FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction
                                                 ORDER BY dateTime DESC) AS rank_number
                    FROM bid)
              WHERE rank_number <= 1""",
    # q19: top 10 bids per auction (of equal prices the earlier bid ranks first)
    "q19": """SELECT auction, bidder, price, channel, url, epoch_ms(dateTime) AS date_time,
                     extra, rank_number
              FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction
                                                 ORDER BY price DESC, dateTime ASC)
                              AS rank_number FROM bid)
              WHERE rank_number <= 10""",
    # q20: expand bid with auction (category 10)
    "q20": """SELECT B.auction, B.bidder, B.price, B.channel, B.url,
                     epoch_ms(B.dateTime) AS date_time, B.extra,
                     A.itemName AS item_name, A.description, A.initialBid AS initial_bid,
                     A.reserve, epoch_ms(A.dateTime) AS auction_date_time,
                     epoch_ms(A.expires) AS expires, A.seller, A.category,
                     A.extra AS auction_extra
              FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
              WHERE A.category = 10""",
    # q21: add channel id (the hot channels by name, the others from the URL)
    "q21": """SELECT auction, bidder, price, channel,
                     CASE WHEN lower(channel) = 'apple' THEN '0'
                          WHEN lower(channel) = 'google' THEN '1'
                          WHEN lower(channel) = 'facebook' THEN '2'
                          WHEN lower(channel) = 'baidu' THEN '3'
                          ELSE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2)
                     END AS channel_id
              FROM bid
              WHERE regexp_matches(url, '(&|^)channel_id=')
                 OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')""",
    # q22: get URL directories (SPLIT_INDEX 3, 4, 5: split_part is 1-based)
    "q22": """SELECT auction, bidder, price, channel, split_part(url, '/', 4) AS dir1,
                     split_part(url, '/', 5) AS dir2, split_part(url, '/', 6) AS dir3
              FROM bid""",
}


@functools.lru_cache(maxsize=2)
def events_table(num_events: int, config):
    """The events ``0..num_events-1`` of the generator (as the source emits them)."""
    import pyarrow as pa

    from bench.nexmark.generator import NexmarkGenerator

    gen = NexmarkGenerator(config)
    step = 8192
    batches = [
        gen.batch(np.arange(s, min(s + step, num_events), dtype=np.int64))
        for s in range(0, num_events, step)
    ]
    return pa.Table.from_batches(batches)


def reference_rows(query: str, num_events: int, config) -> list[dict]:
    """The rows DuckDB computes for ``query`` over the generated events."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("events_arrow", events_table(num_events, config))
        con.execute(
            "CREATE TABLE events AS SELECT * REPLACE ("
            "CAST(date_time AS TIMESTAMP) AS date_time, "
            "CAST(auction_expires AS TIMESTAMP) AS auction_expires) FROM events_arrow"
        )
        con.execute(_VIEWS)
        rel = con.execute(SQL[query])
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
    finally:
        con.close()
