"""Corpus-wide anomaly detection in Spark, from the raw tables only (per-run verdicts are not
trusted: :func:`spark_analysis.jobs.agreement` compares the two).

Every detector returns rows of (run_id, anomaly, key, op_index, time, detail): the run, the
anomaly type, the key,
the first operation (index and time) that shows it and a short detail. The definitions
follow docs/explanation/protocol-notes.md section 4, simplified to what relational queries over micro-ops can
say (each docstring says how):

========================  ==============================================================
inconsistent-offsets      one offset of a key holds two values (reads of any op, and the
                          offsets of sends acknowledged with acks=all or in a transaction)
duplicate                 one value at two offsets of a key
lost-write                a send acknowledged with acks=all (or committed in a transaction)
                          before the final read, never read by an ok poll, in a run whose
                          final read reached the end of every partition (not compacted)
aborted-read              an ok poll read a value whose send op failed: an aborted
                          transaction under read_committed, or a send that certainly did
                          not happen
nonmonotonic-poll         one process's successive ok reads of a key (no assign/subscribe
                          between) go back or repeat, in the dense order of known offsets
poll-skip                 ... jump over a known offset (allowed with subscribe)
double-ownership          two processes own one partition in one generation at once
                          (rebalance logs: claimed from the assignment until the process's
                          next rebalance entry or its last op)
hw-regression-seen        consumers read offset o of a key, yet after healing the key ends
                          at or below o: the high watermark went back under what was shown
leader-epoch-regression   events: a leader elected for a key with an epoch not above the
                          previous election's
hw-regression             events: a leader's high watermark moved down within one epoch
========================  ==============================================================

The jobs (:data:`DETECTORS`) are fewer than the types: ``values`` finds duplicates and lost
writes from one aggregation per value (lost writes are counted per value), ``poll-order``
both kinds of poll-order anomaly, ``events`` both white-box regressions. They are written
for corpora far larger than memory: one scan of the micro-ops per aggregation, run facts
joined after aggregating, and the rare rows (failed sends, reads that jump) found first so
the rest of the work touches only their runs (see benchmarks/spark_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

_PUSHDOWN_RUNS = 5000  # at most this many runs' ids go into a pushed-down IN filter

# the per-run checker's anomaly types that each Spark detection corresponds to
CHECKER_TYPES: dict[str, tuple[str, ...]] = {
    "inconsistent-offsets": ("inconsistent-offsets",),
    "duplicate": ("duplicate",),
    "lost-write": ("lost-write", "unread-after-heal"),
    "aborted-read": ("G1a",),
    "nonmonotonic-poll": ("nonmonotonic-poll", "int-nonmonotonic-poll"),
    "poll-skip": ("poll-skip", "int-poll-skip"),
    "double-ownership": ("double-ownership",),
    "hw-regression-seen": ("inconsistent-offsets", "lost-write", "unread-after-heal", "invariant-violation"),
    "leader-epoch-regression": ("invariant-violation",),
    "hw-regression": ("invariant-violation",),
}
# families whose checker types are broader than the detection (a white-box invariant
# violation, a lost write...): only "Spark found it, the checker did not" is a disagreement
ONE_WAY = ("hw-regression-seen", "leader-epoch-regression", "hw-regression")


@dataclass
class Corpus:
    runs: DataFrame
    ops: DataFrame
    mops: DataFrame
    events: DataFrame
    verdicts: DataFrame


def load(spark: SparkSession, path: str) -> Corpus:
    from pyspark.sql.pandas.types import from_arrow_schema

    from traces.parquet import SCHEMAS

    def table(name: str) -> DataFrame:
        schema = from_arrow_schema(SCHEMAS[name])
        try:
            return spark.read.schema(schema).parquet(f"{path}/{name}")
        except Exception as e:  # an absent table (no events recorded, say) is empty
            if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
                return spark.createDataFrame([], schema)
            raise

    return Corpus(*(table(t) for t in ("runs", "ops", "mops", "events", "verdicts")))


def _out(df: DataFrame, anomaly, key="key", op_index="op_index", time="time", detail=None) -> DataFrame:
    """The common row shape; ``anomaly`` is a type name or a column holding one."""
    return df.select(
        F.col("run_id"), (F.lit(anomaly) if isinstance(anomaly, str) else anomaly).alias("anomaly"),
        F.col(key).cast("string").alias("key"),
        F.col(op_index).cast("long").alias("op_index"), F.col(time).cast("long").alias("time"),
        (detail if detail is not None else F.lit(None).cast("string")).alias("detail"))


def _run_facts(c: Corpus) -> DataFrame:
    return F.broadcast(c.runs.select("run_id", "acks", "isolation_level", "sub_via", "compacted",
                                     "final_read", "final_read_start", "final_end_offsets"))


def reads(c: Corpus) -> DataFrame:
    return c.mops.where((F.col("kind") == "poll") & F.col("key").isNotNull() & F.col("offset").isNotNull())


def observed(c: Corpus) -> DataFrame:
    """(run, key, offset, value, op, time, kind, type) that the history vouches for: every read, and sends
    whose offset is not just a leader's word (acks=all, or inside a transaction). One scan of
    the micro-ops (a union of two scans would halve what the partial aggregations save)."""
    poll = F.col("kind") == "poll"
    acked = (F.col("kind") == "send") & (F.col("type") == "ok") & ((F.col("acks") == "all") | (F.col("f") == "txn"))
    return (c.mops.where(F.col("key").isNotNull() & F.col("offset").isNotNull() & F.col("kind").isin("poll", "send"))
            .join(_run_facts(c), "run_id", "left").where(poll | acked)
            .select("run_id", "key", "offset", "value", "op_index", "time", "kind", "type"))


def inconsistent_offsets(c: Corpus) -> DataFrame:
    """One aggregation per (run, key, offset) over the reads and the ok sends, keeping the
    reads', sends' and transactional sends' values apart; the run's acks, joined to the few
    groups that hold two values, then says which sends count (as in :func:`observed`)."""
    read = F.col("kind") == "poll"
    send = (F.col("kind") == "send") & (F.col("type") == "ok")
    parts = {"r": read, "s": send, "t": send & (F.col("f") == "txn")}
    aggs = []
    for name, cond in parts.items():
        aggs += [F.min(F.when(cond, F.col("value"))).alias(f"{name}_lo"),
                 F.max(F.when(cond, F.col("value"))).alias(f"{name}_hi")]
    aggs += [F.min(F.when(read, F.col(x))).alias(f"r_{x}") for x in ("time", "op_index")]
    aggs += [F.min(F.when(cond, F.col(x))).alias(f"{name}_{x}") for name, cond in (("s", send), ("t", parts["t"]))
             for x in ("time", "op_index")]
    g = (c.mops.where(F.col("key").isNotNull() & F.col("offset").isNotNull() & F.col("value").isNotNull()
                      & (read | send))
         .groupBy("run_id", "key", "offset").agg(*aggs)
         .where((F.col("r_lo") != F.col("r_hi")) | (F.col("s_lo") != F.col("s_hi"))
                | (F.col("r_lo") != F.col("s_lo")) | (F.col("r_hi") != F.col("s_hi"))))
    pick = {x: F.when(F.col("acks") == "all", F.col(f"s_{x}")).otherwise(F.col(f"t_{x}"))
            for x in ("lo", "hi", "time", "op_index")}
    g = (g.join(_run_facts(c), "run_id", "left")
         .select("run_id", "key", "offset", F.least("r_lo", pick["lo"]).alias("lo"),
                 F.greatest("r_hi", pick["hi"]).alias("hi"), F.least("r_time", pick["time"]).alias("time"),
                 F.least("r_op_index", pick["op_index"]).alias("op_index"))
         .where(F.col("lo") != F.col("hi")))
    return _out(g, "inconsistent-offsets", detail=F.format_string(
        "offset %d holds different values, %d to %d", F.col("offset"), F.col("lo"), F.col("hi")))


def values(c: Corpus) -> DataFrame:
    """duplicate and lost-write from one aggregation per (run, key, value) over
    :func:`observed` (the two share their grouping: one pass instead of two); the run's final
    read facts are joined to the few groups that can hold a lost write."""
    ok_read = (F.col("kind") == "poll") & (F.col("type") == "ok")
    acked = F.col("kind") == "send"  # observed() keeps only the vouched-for sends
    g = (observed(c).where(F.col("value").isNotNull()).groupBy("run_id", "key", "value")
         .agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"), F.min("time").alias("time"),
              F.min("op_index").alias("op_index"), F.max(ok_read.cast("int")).alias("ok_read"),
              F.min(F.when(acked, F.col("time"))).alias("a_time"),
              F.min(F.when(acked, F.col("op_index"))).alias("a_op"),
              F.min(F.when(acked, F.col("offset"))).alias("a_offset"))
         .where((F.col("lo") != F.col("hi")) | ((F.col("ok_read") == 0) & F.col("a_time").isNotNull())))
    g = g.join(_run_facts(c), "run_id", "left")  # broadcast, to the few groups left
    lost = ((F.col("ok_read") == 0) & F.col("a_time").isNotNull() & F.col("final_read") & ~F.col("compacted")
            & (F.col("a_time") < F.col("final_read_start")))

    def found(anomaly, op_index, time, detail):
        return F.struct(F.lit(anomaly).alias("anomaly"), F.col(op_index).cast("long").alias("op_index"),
                        F.col(time).cast("long").alias("time"), detail.alias("detail"))

    # one pass: a group may be both (the union of two filtered copies would aggregate twice)
    rows = g.select("run_id", "key", F.explode(F.array(
        F.when(F.col("lo") != F.col("hi"), found("duplicate", "op_index", "time", F.format_string(
            "value %d at different offsets, %d to %d", F.col("value"), F.col("lo"), F.col("hi")))),
        F.when(lost, found("lost-write", "a_op", "a_time", F.format_string(
            "value %d acknowledged at offset %d, never read", F.col("value"), F.col("a_offset")))))).alias("x"))
    return _out(rows.where(F.col("x").isNotNull()), F.col("x.anomaly"), op_index="x.op_index", time="x.time",
                detail=F.col("x.detail"))


def _few_runs(c: Corpus, found: DataFrame) -> Corpus:
    """``c`` restricted to the runs of ``found`` (a small, persisted DataFrame) when they are
    at most ``_PUSHDOWN_RUNS``: a filter Parquet can use to skip row groups (files are sorted
    by run), and cheaper than a join; else ``c`` itself."""
    found.count()  # materialises the cache: its size then lets the planner broadcast it
    runs = [r[0] for r in found.select("run_id").distinct().limit(_PUSHDOWN_RUNS + 1).collect()]
    if len(runs) > _PUSHDOWN_RUNS:
        return c
    return Corpus(c.runs, c.ops, c.mops.where(F.col("run_id").isin(runs)), c.events, c.verdicts)


def aborted_reads(c: Corpus) -> DataFrame:
    """Failed sends are usually few: they are found first, then only their runs' reads are
    looked at."""
    failed = (c.mops.where((F.col("kind") == "send") & (F.col("type") == "fail") & F.col("value").isNotNull())
              .select("run_id", "key", "value", F.col("f").alias("writer_f"), F.col("op_index").alias("writer"))
              .persist())
    r = (reads(_few_runs(c, failed)).where(F.col("type") == "ok").join(failed, ["run_id", "key", "value"])
         .join(_run_facts(c), "run_id")
         .where((F.col("isolation_level") == "read_committed") | (F.col("writer_f") == "send")))
    return _out(r, "aborted-read", detail=F.format_string(
        "read value %d written by failed op %d", F.col("value"), F.col("writer")))


def poll_order(c: Corpus) -> DataFrame:
    """nonmonotonic-poll and poll-skip: per process and key, successive ok reads (no assign or
    subscribe between them) compared by their position among the key's known offsets
    (markers and compaction leave gaps in raw offsets that are not skips).

    Going back needs no ranks (positions follow offsets); a skip is a known offset strictly
    between two successive reads, looked up only for reads that jump over a raw offset. A
    read's epoch is the number of its process's assign/subscribe ops before it (one small
    list per process, joined to the reads: a running count would take a second sort)."""
    client = c.ops.where((F.col("process") != "nemesis") & (F.col("type") != "invoke"))
    resets = (client.where(F.col("f").isin("assign", "subscribe") & F.col("type").isin("ok", "info"))
              .groupBy("run_id", "process").agg(F.collect_list("index").alias("resets")))
    epoch = F.size(F.filter(F.coalesce("resets", F.array().cast("array<long>")), lambda i: i <= F.col("op_index")))
    s = (reads(c).where(F.col("type") == "ok")
         .select("run_id", "process", "op_index", "mop_index", "pos", "key", "offset", "time")
         .join(resets, ["run_id", "process"], "left").withColumn("epoch", epoch))
    s = s.withColumn("prev_offset", F.lag("offset").over(
        Window.partitionBy("run_id", "process", "key", "epoch").orderBy("op_index", "mop_index", "pos")))
    flagged = s.where((F.col("offset") <= F.col("prev_offset")) | (F.col("offset") > F.col("prev_offset") + 1))
    # usually few: kept, so the known offsets are gathered only for the keys where a read
    # jumped (by a filter Parquet can push down when those runs are few, else by a join)
    flagged = flagged.persist()
    keys = flagged.where(F.col("offset") > F.col("prev_offset") + 1).select("run_id", "key").distinct().persist()
    flagged.count()
    pushed = _few_runs(c, keys)
    known = (observed(pushed).join(keys, ["run_id", "key"], "left_semi")
             .select(F.col("run_id").alias("k_run"), F.col("key").alias("k_key"), F.col("offset").alias("known"))
             .distinct())
    on = ((F.col("run_id") == F.col("k_run")) & (F.col("key") == F.col("k_key"))
          & (F.col("known") > F.col("prev_offset")) & (F.col("known") < F.col("offset")))
    r = (flagged.join(known, on, "left")
         .groupBy("run_id", "process", "key", "op_index", "mop_index", "pos", "offset", "prev_offset", "time")
         .agg(F.count("known").alias("between"))
         .where((F.col("offset") <= F.col("prev_offset")) | (F.col("between") > 0)))
    back = F.col("offset") <= F.col("prev_offset")
    return _out(r, F.when(back, "nonmonotonic-poll").otherwise("poll-skip"), detail=F.when(back, F.format_string(
                    "process %s read offset %d after %d", F.col("process"), F.col("offset"), F.col("prev_offset")))
                .otherwise(F.format_string("process %s read offset %d after %d, skipping known offsets",
                                           F.col("process"), F.col("offset"), F.col("prev_offset"))))


_REBALANCE = T.StructType([T.StructField("rebalance_log", T.ArrayType(T.StructType([
    T.StructField("type", T.StringType()), T.StructField("generation", T.LongType()),
    T.StructField("keys", T.ArrayType(T.StringType())), T.StructField("owned", T.ArrayType(T.StringType())),
])))])


def double_ownership(c: Corpus) -> DataFrame:
    client = c.ops.where((F.col("process") != "nemesis") & (F.col("type") != "invoke"))
    last = client.groupBy("run_id", "process").agg(F.max("time").alias("last_time"))
    entries = (client.where(F.col("extra").contains("rebalance_log"))
               .select("run_id", "process", "index", "time",
                       F.posexplode(F.from_json("extra", _REBALANCE)["rebalance_log"]).alias("pos", "e")))
    w = Window.partitionBy("run_id", "process").orderBy("time", "index", "pos")
    claims = (entries.withColumn("end", F.lead("time").over(w)).join(last, ["run_id", "process"])
              .where(F.col("e.type") == "assigned")
              .select("run_id", "process", "index", F.col("time").alias("start"),
                      F.coalesce("end", "last_time").alias("end"), F.col("e.generation").alias("generation"),
                      F.explode("e.owned").alias("key")))
    a, b = claims.alias("a"), claims.alias("b")
    both = a.join(b, (F.col("a.run_id") == F.col("b.run_id")) & (F.col("a.key") == F.col("b.key"))
                  & (F.col("a.generation") == F.col("b.generation")) & (F.col("a.process") < F.col("b.process"))
                  & (F.col("a.start") <= F.col("b.end")) & (F.col("b.start") <= F.col("a.end")))
    both = both.select(F.col("a.run_id").alias("run_id"), F.col("a.key").alias("key"),
                       F.col("a.generation").alias("generation"), F.col("a.process").alias("p1"),
                       F.col("b.process").alias("p2"), F.least("a.index", "b.index").alias("op_index"),
                       F.greatest("a.start", "b.start").alias("time"))
    return _out(both, "double-ownership", detail=F.format_string(
        "processes %s and %s both own it in generation %d", F.col("p1"), F.col("p2"), F.col("generation")))


def hw_regression_seen(c: Corpus) -> DataFrame:
    facts = _run_facts(c).where(F.col("final_read"))
    r = (reads(c).where(F.col("type") == "ok").join(facts, "run_id")
         .where(F.col("time") < F.col("final_read_start"))
         .withColumn("end", F.element_at("final_end_offsets", F.col("key")))
         .where(F.col("end").isNotNull() & (F.col("offset") >= F.col("end"))))
    g = r.groupBy("run_id", "key").agg(F.min("time").alias("time"), F.min("op_index").alias("op_index"),
                                       F.max("offset").alias("offset"), F.first("end").alias("end"))
    return _out(g, "hw-regression-seen", detail=F.format_string(
        "consumers read offset %d, the partition ends at %d after healing", F.col("offset"), F.col("end")))


def event_regressions(c: Corpus) -> DataFrame:
    elected = c.events.where((F.col("kind") == "leader-elected") & F.col("leader_epoch").isNotNull())
    w = Window.partitionBy("run_id", "key").orderBy("time", "node")
    e = elected.withColumn("prev", F.lag("leader_epoch").over(w)).withColumn("prev_node", F.lag("node").over(w))
    epochs = _out(e.where(F.col("leader_epoch") <= F.col("prev")).withColumn("op_index", F.lit(None)),
                  "leader-epoch-regression", detail=F.format_string(
                      "node %d elected with epoch %d after node %d had epoch %d", F.col("node"),
                      F.col("leader_epoch"), F.col("prev_node"), F.col("prev")))
    hw = c.events.where((F.col("kind") == "hw-advance") & ~F.col("follower") & F.col("high_watermark").isNotNull())
    w2 = Window.partitionBy("run_id", "key", "node", "leader_epoch").orderBy("time")
    h = hw.withColumn("prev", F.lag("high_watermark").over(w2))
    hws = _out(h.where(F.col("high_watermark") < F.col("prev")).withColumn("op_index", F.lit(None)),
               "hw-regression", detail=F.format_string(
                   "leader %d in epoch %d moved its high watermark from %d to %d", F.col("node"),
                   F.col("leader_epoch"), F.col("prev"), F.col("high_watermark")))
    return epochs.unionByName(hws)


DETECTORS = ("inconsistent-offsets", "values", "aborted-read", "poll-order",
             "double-ownership", "hw-regression-seen", "events")


def detect(c: Corpus, only: tuple[str, ...] = DETECTORS) -> dict[str, DataFrame]:
    """Each detector's rows. Building them runs the small preliminary jobs some detectors
    use to narrow their work (failed sends, jumping reads); the big work waits for an action."""
    jobs = {
        "inconsistent-offsets": lambda: inconsistent_offsets(c),
        "values": lambda: values(c),
        "aborted-read": lambda: aborted_reads(c),
        "poll-order": lambda: poll_order(c),
        "double-ownership": lambda: double_ownership(c),
        "hw-regression-seen": lambda: hw_regression_seen(c),
        "events": lambda: event_regressions(c),
    }
    return {name: jobs[name]() for name in only}
