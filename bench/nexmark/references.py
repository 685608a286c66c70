"""Published Nexmark figures the reports compare with (events/s per core)."""

#: per core, from the Nexmark reference run of Flink 1.13 (RocksDB, exactly-once), issue 27
REFERENCE_FLINK_113 = {"q0": 155_000, "q4": 34_000, "q5": 22_000, "q7": 12_000, "q8": 146_000,
                       "q11": 40_000, "q18": 54_000, "q19": 44_000, "q20": 19_000}
#: DBSP's published per-core figures (Rust, a laptop, cores counted as workers), issue 39;
#: source: the DBSP/Feldera Nexmark paper and blog
REFERENCE_DBSP = {"q0": 1_170_000, "q1": 1_090_000, "q2": 1_090_000, "q3": 1_000_000,
                  "q4": 811_000, "q5": 868_000, "q21": 430_000, "q22": 340_000}
