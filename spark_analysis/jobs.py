"""The corpus-wide jobs of ``kafkacheck analyze``, all in Spark (DataFrames; only the small
aggregated results are collected to the driver, by the report).

* :func:`anomalies`: every detector of :mod:`spark_analysis.detect`, marked allowed where
  Kafka permits it (poll skips and reordering with subscribe, skips over compacted records);
* :func:`cycle_checks`: the Elle-style dependency-cycle search of ``properties.cycles`` on
  each run's whole history, in parallel with ``applyInPandas``;
* :func:`rates`: anomaly rates by fault type, fault mix, workload, configuration and bug;
* :func:`time_to_anomaly`: from the latest fault injected before a run's first anomalous op;
* :func:`bug_reveals`: which bug switches each anomaly type reveals (against no switch);
* :func:`agreement`: Spark's findings against the per-run checker verdicts, per run and
  anomaly family; every disagreement is listed.
"""

from __future__ import annotations

from functools import reduce

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_analysis.detect import CHECKER_TYPES, ONE_WAY, Corpus, detect

CYCLE_SCHEMA = T.StructType([
    T.StructField("run_id", T.StringType()), T.StructField("anomaly", T.StringType()),
    T.StructField("count", T.LongType()), T.StructField("op_index", T.LongType()),
    T.StructField("time", T.LongType()), T.StructField("allowed", T.BooleanType()),
])


def anomalies(c: Corpus, detectors: dict[str, DataFrame] | None = None) -> DataFrame:
    """One row per anomaly instance, with ``allowed``."""
    found = list((detectors or detect(c)).values())
    df = reduce(DataFrame.unionByName, found)
    facts = F.broadcast(c.runs.select("run_id", "sub_via", "compacted"))
    return df.join(facts, "run_id").withColumn("allowed", allowed_column()).drop("sub_via", "compacted")


def allowed_column():
    """Whether an anomaly row is allowed, by the checker's table (properties/check_table.py): each
    allowance's types, under its condition, as a column of the runs table."""
    from properties.check_table import allowances

    when = {"always": F.lit(True), "subscribe": F.coalesce(F.col("sub_via").contains("subscribe"), F.lit(False)),
            "compacted": F.coalesce(F.col("compacted"), F.lit(False))}
    allowed = F.lit(False)
    for a in allowances():
        allowed = allowed | (F.col("anomaly").isin(*a.kinds) & when[a.when])
    return allowed


def _cycles_of_run(pdf: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas: one run's ops -> cycle anomaly counts, with the properties checker."""
    import json

    from properties.analysis import analyse, compile_ops
    from properties.check_table import ALWAYS_ALLOWED
    from properties.cycles import Budget, check_cycles

    pdf = pdf.sort_values("index")
    run_id = str(pdf["run_id"].iloc[0])
    weak = str(pdf["acks"].iloc[0]) in ("0", "1")
    ops = []
    for r in pdf.itertuples(index=False):
        p = r.process
        process = p if p == "nemesis" else (int(p) if p.lstrip("-").isdigit() else p)
        op = {"index": int(r.index), "time": int(r.time), "process": process, "type": r.type, "f": r.f,
              "value": json.loads(r.value)}
        if isinstance(r.extra, str):
            op.update(json.loads(r.extra))
        ops.append(op)
    compiled, nemesis = compile_ops(ops, weak_acks=weak)
    a = analyse(compiled, nemesis)
    counts: dict[str, list] = {}

    def add(kind: str, allowed: bool = False, **evidence) -> None:
        first = min(evidence.get("ops") or [-1])
        c = counts.setdefault(kind, [0, first, True])
        c[0] += 1
        c[2] = c[2] and (allowed or kind in ALWAYS_ALLOWED)
        if first >= 0 and (c[1] < 0 or first < c[1]):
            c[1] = first

    check_cycles(a, add, True, Budget())
    times = dict(zip(pdf["index"], pdf["time"], strict=True))
    rows = [(run_id, k, n, first if first >= 0 else None, times.get(first), allowed)
            for k, (n, first, allowed) in sorted(counts.items())]
    return pd.DataFrame(rows, columns=[f.name for f in CYCLE_SCHEMA.fields])


def cycle_checks(c: Corpus) -> DataFrame:
    ops = c.ops.join(F.broadcast(c.runs.select("run_id", "acks")), "run_id").select(
        "run_id", "index", "time", "process", "type", "f", "value", "extra", "acks")
    return ops.groupBy("run_id").applyInPandas(_cycles_of_run, schema=CYCLE_SCHEMA)


def covered_types() -> set[str]:
    """The checker's anomaly types that a Spark detection answers for in both directions;
    the others (white-box invariant violations, stale reads, transaction and group anomalies
    beyond Spark's queries...) come into the report from the checker's verdicts."""
    return {t for fam, ts in CHECKER_TYPES.items() if fam not in ONE_WAY for t in ts}


def checker_only(c: Corpus) -> DataFrame:
    """(run_id, anomaly, count, allowed, first_time) for the checker's anomaly types that no
    Spark detection covers, so that every family the checker reports reaches the rates, the
    heat map, the bug table and the agreement table (first_time is unknown: null)."""
    return (c.verdicts.where(~F.col("anomaly").isin(*sorted(covered_types())))
            .select("run_id", "anomaly", F.col("count").cast("long").alias("count"), "allowed",
                    F.lit(None).cast("long").alias("first_time")))


def per_run(c: Corpus, found: DataFrame) -> DataFrame:
    """(run_id, anomaly, count, allowed, first_time) for every anomaly type a run shows."""
    return found.groupBy("run_id", "anomaly").agg(
        F.count(F.lit(1)).alias("count"), F.min(F.col("allowed").cast("int")).cast("boolean").alias("allowed"),
        F.min("time").alias("first_time"))


def rates(c: Corpus, runs_anomalies: DataFrame) -> dict[str, DataFrame]:
    """Share of runs that show each (not allowed) anomaly type, by dimension."""
    bad = runs_anomalies.where(~F.col("allowed")).select("run_id", "anomaly").distinct()
    runs = c.runs.select("run_id", "workload", "fault_mix", "bug", "acks", "replication_factor",
                         "isolation_level", "idempotence", "faults",
                         F.concat_ws(" ", F.concat(F.lit("acks="), "acks"),
                                     F.concat(F.lit("rf="), F.col("replication_factor").cast("string"))).alias("config"))
    out = {}
    dims = {"fault": F.explode_outer("faults"), "fault_mix": F.col("fault_mix"), "workload": F.col("workload"),
            "config": F.col("config"), "bug": F.col("bug")}
    for name, expr in dims.items():
        r = runs.select("run_id", F.coalesce(expr.cast("string"), F.lit("none")).alias(name)) if name != "fault" else \
            runs.select("run_id", F.explode_outer("faults").alias(name)).fillna({name: "none"})
        totals = r.groupBy(name).agg(F.countDistinct("run_id").alias("runs"))
        any_bad = r.join(bad.select("run_id").distinct(), "run_id").groupBy(name).agg(
            F.countDistinct("run_id").alias("anomalous_runs"))
        by_type = r.join(bad, "run_id").groupBy(name).pivot("anomaly").agg(F.countDistinct("run_id"))
        t = (totals.join(any_bad, name, "left").join(by_type, name, "left").fillna(0)
             .withColumn("anomaly_rate", F.round(F.col("anomalous_runs") / F.col("runs"), 4))
             .orderBy(F.desc("anomaly_rate"), name))
        out[name] = t
    return out


def heatmap(c: Corpus, runs_anomalies: DataFrame) -> DataFrame:
    """Anomaly rate for fault mix x configuration (acks, replication factor)."""
    bad = runs_anomalies.where(~F.col("allowed")).select("run_id").distinct().withColumn("bad", F.lit(1))
    r = c.runs.select("run_id", "fault_mix", F.concat(F.lit("acks="), "acks", F.lit(" rf="),
                                                      F.col("replication_factor").cast("string")).alias("config"))
    return (r.join(bad, "run_id", "left").fillna({"bad": 0}).groupBy("fault_mix", "config")
            .agg(F.count(F.lit(1)).alias("runs"), F.sum("bad").alias("anomalous_runs"))
            .withColumn("anomaly_rate", F.round(F.col("anomalous_runs") / F.col("runs"), 4))
            .orderBy("fault_mix", "config"))


FAULT_STARTS = ("partition", "kill", "pause", "disk-fault", "clock-skew", "loss", "duplicate", "reorder",
                "delay", "straggle", "disk", "offline-partition")


def time_to_anomaly(c: Corpus, runs_anomalies: DataFrame) -> DataFrame:
    """Per run and (not allowed) anomaly type: ms from the latest fault injected at or before
    the first anomalous op (null when the anomaly came before any fault)."""
    faults = c.ops.where((F.col("process") == "nemesis") & (F.col("type") == "invoke")
                         & F.col("f").isin(*FAULT_STARTS)).select("run_id", F.col("time").alias("fault_time"),
                                                                   F.col("f").alias("fault"))
    first = runs_anomalies.where(~F.col("allowed") & F.col("first_time").isNotNull()).select(
        "run_id", "anomaly", "first_time")
    j = first.join(faults, "run_id", "left").where(
        F.col("fault_time").isNull() | (F.col("fault_time") <= F.col("first_time")))
    latest = j.groupBy("run_id", "anomaly", "first_time").agg(
        F.max_by("fault", "fault_time").alias("fault"), F.max("fault_time").alias("fault_time"))
    return latest.withColumn("ms_after_fault", F.round((F.col("first_time") - F.col("fault_time")) / 1e6, 1)) \
        .orderBy("anomaly", "run_id")


def bug_reveals(c: Corpus, runs_anomalies: DataFrame) -> DataFrame:
    """For each bug (and none) and anomaly type: runs with the bug, how many show the anomaly."""
    bad = runs_anomalies.where(~F.col("allowed")).select("run_id", "anomaly").distinct()
    runs = c.runs.select("run_id", "bug")
    totals = runs.groupBy("bug").agg(F.count(F.lit(1)).alias("runs"))
    hits = runs.join(bad, "run_id").groupBy("bug", "anomaly").agg(F.count(F.lit(1)).alias("runs_with"))
    return (hits.join(totals, "bug").withColumn("rate", F.round(F.col("runs_with") / F.col("runs"), 4))
            .orderBy("bug", F.desc("rate")))


def agreement(c: Corpus, runs_anomalies: DataFrame, cycles: DataFrame | None) -> tuple[DataFrame, DataFrame]:
    """(summary, disagreements). For every run and every anomaly family Spark detects: did
    Spark find it, did the per-run checker count any of its types (allowed or not)."""
    families = list(CHECKER_TYPES.items())
    if cycles is not None:
        for k in ("G0", "G1c", "G-single", "G2", "G0-process", "G0-realtime", "G1c-process",
                  "G1c-realtime"):
            families.append((k, (k,)))
    spark = c.runs.sparkSession
    mapping = spark.createDataFrame([(fam, t) for fam, ts in families for t in ts], "family string, anomaly string")
    fam_df = spark.createDataFrame([(fam,) for fam, _ in families], "family string")
    grid = c.runs.select("run_id").crossJoin(F.broadcast(fam_df))
    found = runs_anomalies.select("run_id", F.col("anomaly").alias("family"))
    if cycles is not None:
        found = found.unionByName(cycles.select("run_id", F.col("anomaly").alias("family")))
    found = found.distinct().withColumn("spark", F.lit(True))
    checker = (c.verdicts.join(F.broadcast(mapping), "anomaly").select("run_id", "family").distinct()
               .withColumn("checker", F.lit(True)))
    both = (grid.join(found, ["run_id", "family"], "left").join(checker, ["run_id", "family"], "left")
            .fillna({"spark": False, "checker": False}))
    # a one-way family: the checker's types are broader, so only a Spark finding must agree
    both = both.withColumn("checker", F.when(F.col("family").isin(*ONE_WAY), F.col("checker") & F.col("spark"))
                           .otherwise(F.col("checker")))
    summary = (both.groupBy("family").agg(
        F.sum((F.col("spark") & F.col("checker")).cast("int")).alias("both"),
        F.sum((F.col("spark") & ~F.col("checker")).cast("int")).alias("spark_only"),
        F.sum((~F.col("spark") & F.col("checker")).cast("int")).alias("checker_only"),
        F.sum((~F.col("spark") & ~F.col("checker")).cast("int")).alias("neither"))
        .withColumn("agreement", F.round(
            (F.col("both") + F.col("neither"))
            / (F.col("both") + F.col("neither") + F.col("spark_only") + F.col("checker_only")), 4))
        .orderBy("family"))
    summary = summary.withColumn("source", F.lit("Spark and the checker"))
    # the checker's other families: Spark has no detector for them, so there is nothing to
    # agree on, but they are listed with the runs the checker found them in
    known = covered_types() | {t for fam, ts in families if fam not in CHECKER_TYPES for t in ts}
    extra = (c.verdicts.where(~F.col("anomaly").isin(*sorted(known)))
             .groupBy(F.col("anomaly").alias("family"))
             .agg(F.countDistinct("run_id").alias("checker_only"))
             .select("family", F.lit(0).cast("long").alias("both"), F.lit(0).cast("long").alias("spark_only"),
                     F.col("checker_only").cast("long"),
                     (F.lit(c.runs.count()) - F.col("checker_only")).cast("long").alias("neither"),
                     F.lit(None).cast("double").alias("agreement"),
                     F.lit("the checker only (no Spark detector)").alias("source")))
    summary = summary.unionByName(extra).orderBy("family")
    disagreements = both.where(F.col("spark") != F.col("checker")).join(
        c.runs.select("run_id", "workload", "bug", "fault_mix"), "run_id").orderBy("family", "run_id")
    return summary, disagreements
