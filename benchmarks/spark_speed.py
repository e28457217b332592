"""Spark analysis speed: python benchmarks/spark_speed.py [--rows 50000000] [--corpus-runs 200]

1. Writes a synthetic corpus of --rows micro-op rows (default 50 million) in the Parquet
   layout of traces/parquet.py, vectorised with numpy (no simulation): runs of 8 keys, a
   producer sending every offset with acks=all, a live consumer polling them all and a final
   reader, leader elections and high-watermark events. Into a random fraction of runs
   (--plant-rate, each kind independently, each on its own key so they cannot interact) it
   plants one anomaly of each kind, so the exact number every detection must find is known:
   lost writes (the last offset never read), duplicates (one value at two offsets),
   inconsistent offsets (the final reader sees another value), aborted reads (a read of a
   failed send), nonmonotonic polls (a re-read), poll skips (a missing read), high-watermark
   regressions seen by consumers (the partition ends below what was read), double ownership
   (a second process assigned the same partition in the same generation), leader-epoch and
   high-watermark regressions in the events table.
2. Runs every detection job of spark_analysis.detect (the product's code, unchanged) in
   Spark local mode, then the same queries written in DuckDB SQL over the same files, and
   prints per job the rows found, the time in each engine and the ratio. Each job is forced
   to compute its whole output (count of rows and of the detail text).
3. Measures corpus generation: `kafkacheck corpus --runs N --bugs all` with --jobs 1 and
   --jobs 2, in runs per minute (--corpus-only: just this).

Targets (issue 6, 2 cores): planted anomalies found exactly; all detection jobs over 50M
rows under 90 s together; Spark within 3x DuckDB. Exit status 1 if a count is wrong.
The corpus is kept in --dir (default runs/bench-spark-corpus) and reused when its
parameters match; --runs-per-file sets the file size (runs per Parquet file).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traces.parquet import SCHEMAS  # noqa: E402

K = 8  # keys per run
KEYS = [f"t0:{k}" for k in range(K)]
H = 12  # high-watermark events per key and leader epoch
# planted kinds -> the key each uses and the detection that must find it
PLANTS = {
    "lost-write": 0, "duplicate": 1, "inconsistent-offsets": 2, "aborted-read": 3,
    "nonmonotonic-poll": 4, "poll-skip": 5, "hw-regression-seen": 6, "double-ownership": 7,
    "leader-epoch-regression": 0, "hw-regression": 1,
}
FRESH = 10**12  # values never sent: the inconsistent read and the failed send's value


def _strings(codes: np.ndarray, names: list[str]) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(names)).cast(pa.string())


def _table(name: str, cols: dict) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.table([cols[f.name] if isinstance(cols[f.name], pa.Array) else pa.array(cols[f.name], f.type)
                     for f in schema], schema=schema)


def _sort(cols: dict, by: list[str]) -> dict:
    order = np.lexsort([cols[c] for c in reversed(by)])
    return {k: v[order] for k, v in cols.items()}


def chunk(first: int, c: int, n: int, rate: float, rng: np.random.Generator) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """Runs first..first+c-1, n offsets per key: the tables and the anomalies planted."""
    plant = {kind: rng.random(c) < rate for kind in PLANTS}
    planted = {kind: int(m.sum()) for kind, m in plant.items()}
    run_ids = [f"syn-{first + r:07d}" for r in range(c)]
    frs = 10_000 * n + 100_000  # final read start
    # ---- mops: segment 0 producer sends, 1 live consumer polls, 2 final reader polls
    r, s, j, k = (a.ravel() for a in np.meshgrid(np.arange(c), np.arange(3), np.arange(n), np.arange(K),
                                                 indexing="ij"))
    m = {
        "run": r, "op_index": np.select([s == 0, s == 1], [1 + 2 * j, 2 + 2 * j], 2 + 2 * n + j),
        "mop_index": np.where(s == 0, k, 0), "pos": np.where(s == 0, -1, k), "kind": (s > 0).astype(np.int32),
        "key": k, "offset": j.astype(np.int64), "value": (j * K + k).astype(np.int64), "type": np.zeros_like(r),
        "process": s, "time": np.select([s == 0, s == 1], [10_000 * j + 1_000, 10_000 * j + 5_000],
                                        frs + 1_000 * (j + 1)).astype(np.int64),
        "f": np.where(s == 0, 0, 1),
    }
    keep = np.ones(len(r), bool)
    last = j == n - 1
    o = rng.integers(1, n - 1, c)  # a middle offset per run
    keep &= ~(plant["lost-write"][r] & (s > 0) & last & (k == PLANTS["lost-write"]))
    dup = plant["duplicate"][r] & last & (k == PLANTS["duplicate"])
    m["value"][dup] = PLANTS["duplicate"]  # the value of offset 0
    inc = plant["inconsistent-offsets"][r] & (s == 2) & (j == o[r]) & (k == PLANTS["inconsistent-offsets"])
    m["value"][inc] = FRESH + first + r[inc]
    keep &= ~(plant["poll-skip"][r] & (s == 1) & (j == o[r]) & (k == PLANTS["poll-skip"]))
    m = {name: v[keep] for name, v in m.items()}
    extra: list[dict] = []
    ab = np.flatnonzero(plant["aborted-read"])
    # the failed send (its own op) and the live consumer's read of its value at offset n
    extra.append({"run": ab, "op_index": np.full(len(ab), 3 * n + 2), "mop_index": 0, "pos": -1, "kind": 0,
                  "key": PLANTS["aborted-read"], "offset": -1, "value": FRESH + 10**9 + first + ab, "type": 1,
                  "process": 0, "time": 10_000 * (n - 1) + 2_000, "f": 0})
    extra.append({"run": ab, "op_index": np.full(len(ab), 2 * n), "mop_index": 0, "pos": K, "kind": 1,
                  "key": PLANTS["aborted-read"], "offset": n, "value": FRESH + 10**9 + first + ab, "type": 0,
                  "process": 1, "time": 10_000 * (n - 1) + 5_000, "f": 1})
    nm = np.flatnonzero(plant["nonmonotonic-poll"])  # re-read offset n-2 after n-1
    extra.append({"run": nm, "op_index": np.full(len(nm), 2 * n), "mop_index": 0, "pos": K + 1, "kind": 1,
                  "key": PLANTS["nonmonotonic-poll"], "offset": n - 2, "value": (n - 2) * K + PLANTS["nonmonotonic-poll"],
                  "type": 0, "process": 1, "time": 10_000 * (n - 1) + 5_000, "f": 1})
    for e in extra:
        size = len(e["run"])
        for name in m:
            m[name] = np.concatenate([m[name], np.broadcast_to(np.asarray(e[name], m[name].dtype), size)])
    m = _sort(m, ["run", "time", "op_index", "mop_index", "pos"])
    offset = pa.array(m["offset"], pa.int64(), mask=m["offset"] < 0)
    mops = _table("mops", {
        "run_id": _strings(m["run"], run_ids), "op_index": m["op_index"].astype(np.int64),
        "mop_index": m["mop_index"].astype(np.int32), "pos": m["pos"].astype(np.int32),
        "kind": _strings(m["kind"], ["send", "poll"]), "key": _strings(m["key"], KEYS), "offset": offset,
        "value": m["value"], "record_key": pa.nulls(len(m["run"]), pa.string()),
        "type": _strings(m["type"], ["ok", "fail"]), "process": _strings(m["process"], ["0", "1", "2"]),
        "time": m["time"], "f": _strings(m["f"], ["send", "poll"]),
    })
    # ---- ops (completions): the live consumer's assign, producer ops, polls, final reader
    r, i = (a.ravel() for a in np.meshgrid(np.arange(c), np.arange(3 * n + 2), indexing="ij"))
    proc = np.select([i == 0, i <= 2 * n, i == 2 * n + 1], [1, np.where(i % 2 == 1, 0, 1), 2], 2)
    tm = np.select([i == 0, i <= 2 * n, i == 2 * n + 1],
                   [0, np.where(i % 2 == 1, 10_000 * ((i - 1) // 2) + 1_000, 10_000 * ((i - 2) // 2) + 5_000), frs],
                   frs + 1_000 * (i - 2 * n - 1))
    f = np.select([(i == 0) | (i == 2 * n + 1), proc == 0], [2, 0], 1)
    typ = np.zeros_like(r)
    ext = np.where(i == 0, 0, -1)  # the live consumer's rebalance log: it owns every key
    do = np.flatnonzero(plant["double-ownership"])  # a process 3 assigned key 7 meanwhile
    r, i, proc, tm, f, typ, ext = (np.concatenate([a, b]) for a, b in zip(
        (r, i, proc, tm, f, typ, ext),
        (do, np.full(len(do), 3 * n + 3), np.full(len(do), 3), np.full(len(do), 10_000 * (n // 2)),
         np.full(len(do), 2), np.zeros(len(do), int), np.ones(len(do), int)), strict=True))
    ab = np.flatnonzero(plant["aborted-read"])
    r, i, proc, tm, f, typ, ext = (np.concatenate([a, b]) for a, b in zip(
        (r, i, proc, tm, f, typ, ext),
        (ab, np.full(len(ab), 3 * n + 2), np.zeros(len(ab), int), np.full(len(ab), 10_000 * (n - 1) + 2_000),
         np.zeros(len(ab), int), np.ones(len(ab), int), np.full(len(ab), -1)), strict=True))
    order = np.lexsort([i, r])
    r, i, proc, tm, f, typ, ext = (a[order] for a in (r, i, proc, tm, f, typ, ext))

    def log(owned):
        return json.dumps({"rebalance_log": [{"type": "assigned", "generation": 1, "keys": owned, "owned": owned}]})

    ops = _table("ops", {
        "run_id": _strings(r, run_ids), "index": i.astype(np.int64), "time": tm.astype(np.int64),
        "process": _strings(proc, ["0", "1", "2", "3"]), "type": _strings(typ, ["ok", "fail"]),
        "f": _strings(f, ["send", "poll", "assign"]), "error": pa.nulls(len(r), pa.string()),
        "node": pa.nulls(len(r), pa.int64()), "value": pa.nulls(len(r), pa.string()),
        "extra": pa.array([None, log(KEYS), log([KEYS[PLANTS["double-ownership"]]])], pa.string()).take(
            pa.array(ext + 1)),
    })
    # ---- events: per key, two elections and H high-watermark advances per epoch
    r, k, e, h = (a.ravel() for a in np.meshgrid(np.arange(c), np.arange(K), np.arange(2), np.arange(H + 1),
                                                 indexing="ij"))
    ev = {"run": r, "key": k, "epoch": e + 1, "node": (k + e) % 3, "time": 10_000 * n // 2 * e + 100 * h,
          "kind": (h > 0).astype(int), "hw": e * H + h}
    er = np.flatnonzero(plant["leader-epoch-regression"])  # another election with epoch 2
    hr = np.flatnonzero(plant["hw-regression"])  # epoch 2's leader moves its high watermark back to 0
    key_er, key_hr = PLANTS["leader-epoch-regression"], PLANTS["hw-regression"]
    for rows, add in ((er, {"key": key_er, "epoch": 2, "node": (key_er + 2) % 3, "time": 10_000 * n, "kind": 0,
                            "hw": 0}),
                      (hr, {"key": key_hr, "epoch": 2, "node": (key_hr + 1) % 3, "time": 10_000 * n, "kind": 1,
                            "hw": 0})):
        ev["run"] = np.concatenate([ev["run"], rows])
        for name, v in add.items():
            ev[name] = np.concatenate([ev[name], np.full(len(rows), v)])
    ev = _sort(ev, ["run", "time", "key"])
    elected = ev["kind"] == 0
    events = _table("events", {
        "run_id": _strings(ev["run"], run_ids), "time": ev["time"].astype(np.int64),
        "node": ev["node"].astype(np.int64), "kind": _strings(ev["kind"], ["leader-elected", "hw-advance"]),
        "key": _strings(ev["key"], KEYS), "leader_epoch": ev["epoch"].astype(np.int64),
        "high_watermark": pa.array(ev["hw"], pa.int64(), mask=elected), "follower": np.zeros(len(ev["run"]), bool),
        "attrs": pa.nulls(len(ev["run"]), pa.string()),
    })
    # ---- runs
    ends = []
    for x in range(c):
        end = dict.fromkeys(KEYS, n)
        if plant["aborted-read"][x]:
            end[KEYS[PLANTS["aborted-read"]]] = n + 1
        if plant["hw-regression-seen"][x]:
            end[KEYS[PLANTS["hw-regression-seen"]]] = n - 1
        ends.append(sorted(end.items()))
    runs = _table("runs", {
        "run_id": run_ids, "seed": list(range(first, first + c)), "target": ["synthetic"] * c,
        "workload": ["queue"] * c, "config": ["{}"] * c, "faults": [[]] * c, "fault_mix": ["none"] * c,
        "bugs": [[]] * c, "bug": ["none"] * c, "acks": ["all"] * c, "idempotence": [True] * c,
        "isolation_level": ["read_committed"] * c, "txn": [False] * c, "replication_factor": [3] * c,
        "min_insync_replicas": [2] * c, "sub_via": ["assign"] * c, "compacted": [False] * c,
        "final_read": [True] * c, "final_read_start": [frs] * c, "final_end_offsets": ends,
        "valid": ["true"] * c, "ops_count": [3 * n + 2] * c, "meta": ["{}"] * c,
    })
    verdicts = pa.table([pa.array([], f.type) for f in SCHEMAS["verdicts"]], schema=SCHEMAS["verdicts"])
    return {"runs": runs, "ops": ops, "mops": mops, "events": events, "verdicts": verdicts}, planted


def generate(path: Path, rows: int, runs: int, per_file: int, rate: float, seed: int) -> dict:
    params = {"rows": rows, "runs": runs, "runs_per_file": per_file, "plant_rate": rate, "seed": seed, "version": 1}
    manifest = path / "synthetic.json"
    if manifest.exists():
        old = json.loads(manifest.read_text())
        if old.get("params") == params:
            print(f"reusing the corpus in {path}")
            return old
    shutil.rmtree(path, ignore_errors=True)
    n = max(4, round(rows / (runs * 3 * K)))
    planted = dict.fromkeys(PLANTS, 0)
    counts = dict.fromkeys(SCHEMAS, 0)
    t = time.perf_counter()
    for part, first in enumerate(range(0, runs, per_file)):
        rng = np.random.default_rng([seed, part])
        tables, got = chunk(first, min(per_file, runs - first), n, rate, rng)
        for kind, v in got.items():
            planted[kind] += v
        for name, table in tables.items():
            (path / name).mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path / name / f"part-{part:05d}.parquet")
            counts[name] += table.num_rows
        print(f"\r  writing: {first + per_file:,}/{runs:,} runs, {counts['mops']:,} micro-op rows",
              end="", flush=True)
    print(f"\n  written in {time.perf_counter() - t:.1f} s")
    info = {"params": params, "planted": planted, "rows": counts, "offsets_per_key": n}
    manifest.write_text(json.dumps(info, indent=1))
    return info


# ------------------------------------------------------------------ the same queries in DuckDB

DUCK_VIEWS = """
CREATE VIEW runs AS SELECT * FROM read_parquet('{d}/runs/*.parquet');
CREATE VIEW ops AS SELECT * FROM read_parquet('{d}/ops/*.parquet');
CREATE VIEW mops AS SELECT * FROM read_parquet('{d}/mops/*.parquet');
CREATE VIEW events AS SELECT * FROM read_parquet('{d}/events/*.parquet');
CREATE VIEW reads AS SELECT * FROM mops WHERE kind = 'poll' AND key IS NOT NULL AND "offset" IS NOT NULL;
CREATE VIEW obs AS
  SELECT run_id, key, "offset", value, op_index, time FROM reads
  UNION ALL
  SELECT m.run_id, m.key, m."offset", m.value, m.op_index, m.time FROM mops m JOIN runs r USING (run_id)
  WHERE m.kind = 'send' AND m.type = 'ok' AND m."offset" IS NOT NULL AND (r.acks = 'all' OR m.f = 'txn');
"""

DUCK_JOBS = {
    "inconsistent-offsets": """
SELECT run_id, 'inconsistent-offsets' AS anomaly, key, min(op_index) AS op_index, min(time) AS time,
       printf('offset %d holds different values, %d to %d', "offset", min(value), max(value)) AS detail
FROM obs WHERE value IS NOT NULL GROUP BY run_id, key, "offset" HAVING min(value) <> max(value)""",
    "values": """
WITH acked AS (
  SELECT m.* FROM mops m JOIN runs r USING (run_id)
  WHERE m.kind = 'send' AND m.type = 'ok' AND m."offset" IS NOT NULL AND m.value IS NOT NULL AND m.key IS NOT NULL
    AND (r.acks = 'all' OR m.f = 'txn'))
SELECT run_id, 'duplicate' AS anomaly, key, min(op_index) AS op_index, min(time) AS time,
       printf('value %d at different offsets, %d to %d', value, min("offset"), max("offset")) AS detail
FROM obs WHERE value IS NOT NULL GROUP BY run_id, key, value HAVING min("offset") <> max("offset")
UNION ALL
SELECT a.run_id, 'lost-write' AS anomaly, a.key, min(a.op_index), min(a.time),
       printf('value %d acknowledged at offset %d, never read', a.value, min(a."offset"))
FROM acked a JOIN runs r USING (run_id)
WHERE r.final_read AND NOT r.compacted AND a.time < r.final_read_start
  AND NOT EXISTS (SELECT 1 FROM reads x WHERE x.type = 'ok' AND x.run_id = a.run_id AND x.key = a.key
                  AND x.value = a.value)
GROUP BY a.run_id, a.key, a.value""",
    "aborted-read": """
SELECT x.run_id, 'aborted-read' AS anomaly, x.key, x.op_index, x.time,
       printf('read value %d written by failed op %d', x.value, w.writer) AS detail
FROM reads x
JOIN (SELECT run_id, key, value, f AS writer_f, op_index AS writer FROM mops
      WHERE kind = 'send' AND type = 'fail' AND value IS NOT NULL) w USING (run_id, key, value)
JOIN runs r USING (run_id)
WHERE x.type = 'ok' AND (r.isolation_level = 'read_committed' OR w.writer_f = 'send')""",
    "poll-order": """
WITH known AS (
  SELECT run_id, key, "offset", dense_rank() OVER (PARTITION BY run_id, key ORDER BY "offset") AS idx
  FROM (SELECT DISTINCT run_id, key, "offset" FROM obs)),
resets AS (
  SELECT run_id, process, "index" AS op_index,
         sum(CASE WHEN f IN ('assign', 'subscribe') AND type IN ('ok', 'info') THEN 1 ELSE 0 END)
           OVER (PARTITION BY run_id, process ORDER BY "index"
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS epoch
  FROM ops WHERE process <> 'nemesis' AND type <> 'invoke'),
r AS (
  SELECT x.*, k.idx, s.epoch FROM reads x JOIN known k USING (run_id, key, "offset")
  JOIN resets s USING (run_id, process, op_index) WHERE x.type = 'ok'),
w AS (
  SELECT *, lag(idx) OVER win AS prev_idx, lag("offset") OVER win AS prev_offset FROM r
  WINDOW win AS (PARTITION BY run_id, process, key, epoch ORDER BY op_index, mop_index, pos))
SELECT run_id, CASE WHEN idx <= prev_idx THEN 'nonmonotonic-poll' ELSE 'poll-skip' END AS anomaly, key,
       op_index, time,
       CASE WHEN idx <= prev_idx THEN printf('process %s read offset %d after %d', process, "offset", prev_offset)
            ELSE printf('process %s read offset %d after %d, skipping known offsets', process, "offset",
                        prev_offset) END AS detail
FROM w WHERE idx <= prev_idx OR idx > prev_idx + 1""",
    "double-ownership": """
WITH client AS (SELECT * FROM ops WHERE process <> 'nemesis' AND type <> 'invoke'),
last AS (SELECT run_id, process, max(time) AS last_time FROM client GROUP BY run_id, process),
logs AS (
  SELECT run_id, process, "index", time,
         json_transform(extra, '{"rebalance_log": [{"type": "VARCHAR", "generation": "BIGINT",
                                 "owned": ["VARCHAR"]}]}').rebalance_log AS log
  FROM client WHERE contains(extra, 'rebalance_log')),
entries AS (SELECT run_id, process, "index", time, unnest(log) AS e, generate_subscripts(log, 1) AS pos FROM logs),
claims AS (
  SELECT e.run_id, e.process, e."index", e.time AS start, coalesce(e."end", l.last_time) AS "end",
         e.e.generation AS generation, unnest(e.e.owned) AS key
  FROM (SELECT *, lead(time) OVER (PARTITION BY run_id, process ORDER BY time, "index", pos) AS "end"
        FROM entries) e
  JOIN last l USING (run_id, process) WHERE e.e.type = 'assigned')
SELECT a.run_id, 'double-ownership' AS anomaly, a.key, least(a."index", b."index") AS op_index,
       greatest(a.start, b.start) AS time,
       printf('processes %s and %s both own it in generation %d', a.process, b.process, a.generation) AS detail
FROM claims a JOIN claims b ON a.run_id = b.run_id AND a.key = b.key AND a.generation = b.generation
  AND a.process < b.process AND a.start <= b."end" AND b.start <= a."end\"""",
    "hw-regression-seen": """
SELECT run_id, 'hw-regression-seen' AS anomaly, key, min(op_index) AS op_index, min(time) AS time,
       printf('consumers read offset %d, the partition ends at %d after healing', max("offset"), first("end"))
         AS detail
FROM (SELECT x.*, r.final_end_offsets[x.key] AS "end" FROM reads x JOIN runs r USING (run_id)
      WHERE x.type = 'ok' AND r.final_read AND x.time < r.final_read_start)
WHERE "end" IS NOT NULL AND "offset" >= "end" GROUP BY run_id, key""",
    "events": """
SELECT run_id, 'leader-epoch-regression' AS anomaly, key, NULL AS op_index, time,
       printf('node %d elected with epoch %d after node %d had epoch %d', node, leader_epoch, prev_node, prev)
         AS detail
FROM (SELECT *, lag(leader_epoch) OVER w AS prev, lag(node) OVER w AS prev_node FROM events
      WHERE kind = 'leader-elected' AND leader_epoch IS NOT NULL
      WINDOW w AS (PARTITION BY run_id, key ORDER BY time, node))
WHERE leader_epoch <= prev
UNION ALL
SELECT run_id, 'hw-regression' AS anomaly, key, NULL AS op_index, time,
       printf('leader %d in epoch %d moved its high watermark from %d to %d', node, leader_epoch, prev,
              high_watermark) AS detail
FROM (SELECT *, lag(high_watermark) OVER (PARTITION BY run_id, key, node, leader_epoch ORDER BY time) AS prev
      FROM events WHERE kind = 'hw-advance' AND NOT follower AND high_watermark IS NOT NULL)
WHERE high_watermark < prev""",
}


def run_duckdb(path: Path) -> dict[str, tuple[float, dict[str, int]]]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count() or 2}")
    con.execute(DUCK_VIEWS.format(d=path))
    out = {}
    for name, sql in DUCK_JOBS.items():
        t = time.perf_counter()
        rows = con.execute(f"SELECT anomaly, count(*), count(detail) FROM ({sql}) GROUP BY anomaly").fetchall()
        out[name] = (time.perf_counter() - t, {a: n for a, n, _ in rows})
        print(f"  duckdb {name}: {out[name][0]:.1f} s", flush=True)
    con.close()
    return out


def run_spark(path: Path) -> tuple[float, dict[str, tuple[float, dict[str, int]]]]:
    from pyspark.sql import functions as F

    from spark_analysis.detect import DETECTORS, detect, load
    from spark_analysis.session import get_spark

    t = time.perf_counter()
    spark = get_spark(app_name="spark_speed")
    start = time.perf_counter() - t
    corpus = load(spark, str(path))
    out = {}
    for name in DETECTORS:
        t = time.perf_counter()
        df = detect(corpus, (name,))[name]  # some detectors run small jobs while being built
        rows = df.groupBy("anomaly").agg(F.count("*").alias("n"), F.count("detail")).collect()
        out[name] = (time.perf_counter() - t, {row["anomaly"]: row["n"] for row in rows})
        print(f"  spark {name}: {out[name][0]:.1f} s", flush=True)
    spark.stop()
    return start, out


def corpus_speed(runs: int) -> dict[int, float]:
    speed = {}
    for jobs in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "kafkacheck.cli", "corpus", "--runs", str(runs), "--out",
                                   f"{d}/c", "--jobs", str(jobs), "--plan-seed", "1", "--bugs", "all"],
                                  cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"kafkacheck corpus failed:\n{done.stderr[-3000:]}")
            speed[jobs] = runs / ((time.perf_counter() - t) / 60)
        print(f"  kafkacheck corpus --bugs all --jobs {jobs}: {speed[jobs]:.0f} runs/min", flush=True)
    print(f"  --jobs 2 / --jobs 1: {speed[2] / speed[1]:.2f}x")
    return speed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rows", type=int, default=50_000_000, help="micro-op rows of the synthetic corpus")
    ap.add_argument("--runs", type=int, default=10_000, help="runs in the synthetic corpus")
    ap.add_argument("--runs-per-file", type=int, default=1000, help="runs per Parquet file")
    ap.add_argument("--plant-rate", type=float, default=0.01, help="fraction of runs given each planted anomaly")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", type=Path, default=ROOT / "runs" / "bench-spark-corpus")
    ap.add_argument("--corpus-runs", type=int, default=200,
                    help="runs for the `kafkacheck corpus` speed measurement (0: skip it)")
    ap.add_argument("--skip-duckdb", action="store_true")
    ap.add_argument("--corpus-only", action="store_true", help="only measure `kafkacheck corpus`")
    args = ap.parse_args()
    if args.runs < 1 or args.runs_per_file < 1 or args.rows < args.runs * 3 * K * 4:
        ap.error(f"need --runs >= 1, --runs-per-file >= 1 and --rows >= {3 * K * 4} x --runs")

    if args.corpus_only:
        corpus_speed(args.corpus_runs or 200)
        return
    print(f"1. synthetic corpus: {args.rows:,} micro-op rows in {args.runs:,} runs, "
          f"{args.runs_per_file} runs a file")
    info = generate(args.dir, args.rows, args.runs, args.runs_per_file, args.plant_rate, args.seed)
    size = sum(f.stat().st_size for f in args.dir.rglob("*.parquet"))
    print("  rows: " + ", ".join(f"{t} {n:,}" for t, n in info["rows"].items()) + f"; {size / 2**20:.0f} MiB")
    print("2. detection jobs, Spark local mode (the product's code)")
    start, spark = run_spark(args.dir)
    duck = {} if args.skip_duckdb else (print("   the same queries in DuckDB") or run_duckdb(args.dir))

    planted = info["planted"]
    ok = True
    found_spark = {a: n for _, got in spark.values() for a, n in got.items()}
    found_duck = {a: n for _, got in duck.values() for a, n in got.items()}
    print(f"\n{'anomaly':26} {'planted':>8} {'spark':>8} {'duckdb':>8}")
    for kind in sorted(set(planted) | set(found_spark) | set(found_duck)):
        p, s, d = planted.get(kind, 0), found_spark.get(kind, 0), found_duck.get(kind, 0) if duck else None
        exact = s == p and (d is None or d == p)
        ok &= exact
        print(f"{kind:26} {p:8,} {s:8,} {'-' if d is None else f'{d:8,}':>8}  {'exact' if exact else 'WRONG'}")
    print(f"\n{'job':22} {'spark s':>8} {'duckdb s':>9} {'ratio':>6}")
    for name in spark:
        s = spark[name][0]
        d = duck[name][0] if duck else None
        print(f"{name:22} {s:8.1f} {'-' if d is None else f'{d:9.1f}':>9} "
              f"{'-' if not d else f'{s / d:6.1f}':>6}")
    ts = sum(v[0] for v in spark.values())
    td = sum(v[0] for v in duck.values()) if duck else None
    print(f"{'all jobs':22} {ts:8.1f} {'-' if td is None else f'{td:9.1f}':>9} "
          f"{'-' if not td else f'{ts / td:6.1f}':>6}   (session start {start:.1f} s, not counted)")
    print(f"targets: planted found exactly: {'yes' if ok else 'NO'}; all Spark jobs < 90 s: "
          f"{'yes' if ts < 90 else 'NO'} ({ts:.0f} s)"
          + ("" if td is None else f"; Spark within 3x DuckDB: {'yes' if ts <= 3 * td else 'NO'} ({ts / td:.1f}x)"))
    if args.corpus_runs:
        print(f"3. corpus generation, {args.corpus_runs} runs")
        corpus_speed(args.corpus_runs)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
