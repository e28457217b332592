"""Corpus-wide anomaly detection in Spark, from the raw tables only (per-run verdicts are not
trusted: :func:`spark_analysis.jobs.agreement` compares the two).

Every detector returns rows of (run_id, anomaly, key, op_index, time, detail): the run, the
anomaly type, the key,
the first operation (index and time) that shows it and a short detail. The definitions
follow PROTOCOL_NOTES.md section 4, simplified to what relational queries over micro-ops can
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
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

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


def _out(df: DataFrame, anomaly: str, key="key", op_index="op_index", time="time", detail=None) -> DataFrame:
    return df.select(
        F.col("run_id"), F.lit(anomaly).alias("anomaly"), F.col(key).cast("string").alias("key"),
        F.col(op_index).cast("long").alias("op_index"), F.col(time).cast("long").alias("time"),
        (detail if detail is not None else F.lit(None).cast("string")).alias("detail"))


def _run_facts(c: Corpus) -> DataFrame:
    return F.broadcast(c.runs.select("run_id", "acks", "isolation_level", "sub_via", "compacted",
                                     "final_read", "final_read_start", "final_end_offsets"))


def reads(c: Corpus) -> DataFrame:
    return c.mops.where((F.col("kind") == "poll") & F.col("key").isNotNull() & F.col("offset").isNotNull())


def observed(c: Corpus) -> DataFrame:
    """(run, key, offset, value, op, time) that the history vouches for: every read, and sends
    whose offset is not just a leader's word (acks=all, or inside a transaction)."""
    r = reads(c).select("run_id", "key", "offset", "value", "op_index", "time")
    s = (c.mops.where((F.col("kind") == "send") & (F.col("type") == "ok") & F.col("offset").isNotNull())
         .join(_run_facts(c), "run_id")
         .where((F.col("acks") == "all") | (F.col("f") == "txn"))
         .select("run_id", "key", "offset", "value", "op_index", "time"))
    return r.unionByName(s)


def _several(obs: DataFrame, by: str, several: str, anomaly: str, text: str) -> DataFrame:
    """Rows where one ``by`` of a key holds two or more distinct ``several``."""
    g = (obs.where(F.col("value").isNotNull()).groupBy("run_id", "key", by)
         .agg(F.countDistinct(several).alias("n"), F.min("time").alias("time"),
              F.min("op_index").alias("op_index"), F.array_sort(F.collect_set(several)).alias("them"))
         .where(F.col("n") > 1))
    return _out(g, anomaly, detail=F.format_string(
        text, F.col(by), F.concat_ws(", ", F.slice("them", 1, 5).cast("array<string>"))))


def inconsistent_offsets(obs: DataFrame) -> DataFrame:
    return _several(obs, "offset", "value", "inconsistent-offsets", "offset %d holds values %s")


def duplicates(obs: DataFrame) -> DataFrame:
    return _several(obs, "value", "offset", "duplicate", "value %d at offsets %s")


def lost_writes(c: Corpus) -> DataFrame:
    acked = (c.mops.where((F.col("kind") == "send") & (F.col("type") == "ok") & F.col("offset").isNotNull()
                          & F.col("value").isNotNull())
             .join(_run_facts(c), "run_id")
             .where(((F.col("acks") == "all") | (F.col("f") == "txn")) & F.col("final_read")
                    & ~F.col("compacted") & (F.col("time") < F.col("final_read_start"))))
    ok_reads = reads(c).where(F.col("type") == "ok").select("run_id", "key", "value").distinct()
    lost = acked.join(ok_reads, ["run_id", "key", "value"], "left_anti")
    return _out(lost, "lost-write", detail=F.format_string(
        "value %d acknowledged at offset %d, never read", F.col("value"), F.col("offset")))


def aborted_reads(c: Corpus) -> DataFrame:
    failed = (c.mops.where((F.col("kind") == "send") & (F.col("type") == "fail") & F.col("value").isNotNull())
              .select("run_id", "key", "value", F.col("f").alias("writer_f"), F.col("op_index").alias("writer")))
    r = (reads(c).where(F.col("type") == "ok").join(failed, ["run_id", "key", "value"])
         .join(_run_facts(c), "run_id")
         .where((F.col("isolation_level") == "read_committed") | (F.col("writer_f") == "send")))
    return _out(r, "aborted-read", detail=F.format_string(
        "read value %d written by failed op %d", F.col("value"), F.col("writer")))


def poll_order(c: Corpus, obs: DataFrame) -> DataFrame:
    """nonmonotonic-poll and poll-skip: per process and key, successive ok reads compared by
    their position among the key's known offsets (markers and compaction leave gaps in raw
    offsets that are not skips)."""
    known = obs.select("run_id", "key", "offset").distinct().withColumn(
        "idx", F.dense_rank().over(Window.partitionBy("run_id", "key").orderBy("offset")))
    client = c.ops.where((F.col("process") != "nemesis") & (F.col("type") != "invoke"))
    resets = client.select(
        "run_id", "process", F.col("index").alias("op_index"),
        F.sum(F.when(F.col("f").isin("assign", "subscribe") & F.col("type").isin("ok", "info"), 1).otherwise(0))
        .over(Window.partitionBy("run_id", "process").orderBy("index")
              .rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("epoch"))
    r = (reads(c).where(F.col("type") == "ok")
         .join(known, ["run_id", "key", "offset"])
         .join(resets, ["run_id", "process", "op_index"]))
    w = Window.partitionBy("run_id", "process", "key", "epoch").orderBy("op_index", "mop_index", "pos")
    r = r.withColumn("prev_idx", F.lag("idx").over(w)).withColumn("prev_offset", F.lag("offset").over(w))
    back = _out(r.where(F.col("idx") <= F.col("prev_idx")), "nonmonotonic-poll", detail=F.format_string(
        "process %s read offset %d after %d", F.col("process"), F.col("offset"), F.col("prev_offset")))
    skip = _out(r.where(F.col("idx") > F.col("prev_idx") + 1), "poll-skip", detail=F.format_string(
        "process %s read offset %d after %d, skipping known offsets", F.col("process"), F.col("offset"),
        F.col("prev_offset")))
    return back.unionByName(skip)


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


DETECTORS = ("inconsistent-offsets", "duplicate", "lost-write", "aborted-read", "poll-order",
             "double-ownership", "hw-regression-seen", "events")


def detect(c: Corpus, only: tuple[str, ...] = DETECTORS) -> dict[str, DataFrame]:
    """Each detector's rows, lazily (nothing runs until an action)."""
    obs = observed(c)
    jobs = {
        "inconsistent-offsets": lambda: inconsistent_offsets(obs),
        "duplicate": lambda: duplicates(obs),
        "lost-write": lambda: lost_writes(c),
        "aborted-read": lambda: aborted_reads(c),
        "poll-order": lambda: poll_order(c, obs),
        "double-ownership": lambda: double_ownership(c),
        "hw-regression-seen": lambda: hw_regression_seen(c),
        "events": lambda: event_regressions(c),
    }
    return {name: jobs[name]() for name in only}
