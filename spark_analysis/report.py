"""Run every job over a corpus and write the report: CSV and Markdown tables, PNG plots and an
``index.html`` that shows them. Only aggregated results reach the driver (``toPandas`` on
tables of at most a few thousand rows; the anomaly list is written by Spark itself)."""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from spark_analysis import jobs
from spark_analysis.detect import DETECTORS, load

MAX_TABLE_ROWS = 2000   # rows of one table collected to the driver (the CSV says when cut)


@dataclass
class Report:
    out: Path
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    plots: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _table(r: Report, name: str, df, title: str) -> pd.DataFrame:
    pdf = df.limit(MAX_TABLE_ROWS + 1).toPandas()
    cut = len(pdf) > MAX_TABLE_ROWS
    pdf = pdf.head(MAX_TABLE_ROWS)
    pdf.to_csv(r.out / f"{name}.csv", index=False)
    md = _markdown(pdf) if len(pdf) else "(none)"
    (r.out / f"{name}.md").write_text(f"# {title}\n\n{md}\n" + (f"\n(first {MAX_TABLE_ROWS} rows)\n" if cut else ""))
    r.tables[name] = pdf
    return pdf


def _markdown(pdf: pd.DataFrame) -> str:
    def cell(v) -> str:
        return "" if v is None or (not isinstance(v, (list, tuple)) and pd.isna(v)) else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, pdf.columns)) + " |", "|" + "---|" * len(pdf.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in pdf.itertuples(index=False)]
    return "\n".join(lines)


def analyze(corpus: str, out: Path, spark, cycles: bool = True,
            progress: Callable[[str, str], None] | None = None) -> Report:
    """All jobs; ``progress(job, state)`` with state 'start' or a duration."""
    out.mkdir(parents=True, exist_ok=True)
    r = Report(out)

    def step(name: str, fn):
        if progress:
            progress(name, "start")
        t = time.monotonic()
        v = fn()
        r.timings.append((name, time.monotonic() - t))
        if progress:
            progress(name, f"{time.monotonic() - t:.1f} s")
        return v

    c = load(spark, corpus)
    n_runs = step("load corpus", lambda: c.runs.count())
    if n_runs == 0:
        raise ValueError(f"{corpus}: the corpus holds no runs")
    # each detector is one job; its rows are cached so the later jobs reuse them
    found_parts = {}
    for name in DETECTORS:
        def run(name=name):
            df = jobs.detect(c, (name,))[name].cache()
            df.count()
            return df
        found_parts[name] = step(f"detect {name}", run)
    found = jobs.anomalies(c, found_parts).cache()
    step("anomalies: write", lambda: found.orderBy("run_id", "time").write.mode("overwrite")
         .parquet(str(out / "anomalies.parquet")))
    runs_anoms = jobs.per_run(c, found)
    cyc = None
    if cycles:
        cyc = jobs.cycle_checks(c).cache()
        step("per-run cycle checks (applyInPandas)", lambda: cyc.count())
        cyc_runs = cyc.select("run_id", "anomaly", "count", "allowed", cyc["time"].alias("first_time"))
        runs_anoms = runs_anoms.unionByName(cyc_runs)
        _table(r, "cycles", cyc.groupBy("anomaly", "allowed").agg({"run_id": "count", "count": "sum"})
               .withColumnRenamed("count(run_id)", "runs").withColumnRenamed("sum(count)", "cycles")
               .orderBy("anomaly"), "Dependency cycles found per run (properties.cycles in applyInPandas)")
    spark_types = runs_anoms.select("anomaly").distinct()
    runs_anoms = runs_anoms.unionByName(jobs.checker_only(c)).cache()
    from pyspark.sql import functions as F

    step("anomaly counts", lambda: _table(
        r, "anomaly_counts", runs_anoms.groupBy("anomaly", "allowed").agg(
            {"run_id": "count", "count": "sum"}).withColumnRenamed("count(run_id)", "runs")
        .withColumnRenamed("sum(count)", "instances")
        .join(spark_types.withColumn("found_by", F.lit("Spark")), "anomaly", "left")
        .fillna({"found_by": "the checker (no Spark detector)"}).orderBy("anomaly"),
        "Anomalies in the corpus (runs showing each type, instances): found by Spark, and the "
        "checker's types that Spark has no detector for"))
    rates = jobs.rates(c, runs_anoms)
    for dim, df in rates.items():
        step(f"rates by {dim}", lambda dim=dim, df=df: _table(r, f"rate_by_{dim}", df, f"Anomaly rate by {dim}"))
    step("heat map fault mix x configuration", lambda: _table(r, "heatmap", jobs.heatmap(c, runs_anoms),
                                                               "Anomaly rate by fault mix and configuration"))
    step("time from fault to anomaly", lambda: _table(r, "time_to_anomaly", jobs.time_to_anomaly(c, runs_anoms),
                                                      "Time from the latest fault to the first anomalous op"))
    step("bug switches revealed", lambda: _table(r, "bug_reveals", jobs.bug_reveals(c, runs_anoms),
                                                 "Which bug switches reveal which anomaly types"))
    summary, dis = jobs.agreement(c, runs_anoms, cyc)
    step("agreement with per-run verdicts", lambda: (_table(r, "agreement", summary,
                                                            "Spark findings vs per-run checker verdicts"),
                                                     _table(r, "disagreements", dis, "Disagreements, run by run")))
    step("plots", lambda: plots(r))
    write_index(r, corpus, n_runs)
    return r


# ------------------------------------------------------------------ plots and page


def plots(r: Report) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = r.tables.get("rate_by_fault")
    if t is not None and len(t):
        fig, ax = plt.subplots(figsize=(7, 3.8))
        t = t.sort_values("fault")
        ax.bar(t["fault"].astype(str), t["anomaly_rate"], color="#c0504d")
        for i, (rate, n) in enumerate(zip(t["anomaly_rate"], t["runs"], strict=True)):
            ax.text(i, rate, f"{rate:.0%}\n({n} runs)", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("share of runs with an anomaly")
        ax.set_xlabel("fault type in the run's mix")
        ax.set_ylim(0, max(0.05, float(t["anomaly_rate"].max()) * 1.3))
        ax.set_title("Anomaly rate by fault")
        _save(r, fig, "rate_by_fault.png", "Anomaly rate by fault")
    t = r.tables.get("time_to_anomaly")
    if t is not None and t["ms_after_fault"].notna().any():
        fig, ax = plt.subplots(figsize=(7, 3.8))
        d = t.dropna(subset=["ms_after_fault"])
        groups = sorted(d["anomaly"].unique())
        ax.hist([d[d["anomaly"] == g]["ms_after_fault"] / 1000 for g in groups], bins=30, stacked=True, label=groups)
        ax.set_xlabel("seconds from the latest fault to the first anomalous op (virtual time)")
        ax.set_ylabel("runs")
        ax.legend(fontsize=7)
        ax.set_title("Time to anomaly")
        _save(r, fig, "time_to_anomaly.png", "Time from fault to anomaly")
    t = r.tables.get("heatmap")
    if t is not None and len(t):
        m = t.pivot(index="fault_mix", columns="config", values="anomaly_rate")
        n = t.pivot(index="fault_mix", columns="config", values="runs")
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(m.columns), 1.2 + 0.35 * len(m.index)))
        im = ax.imshow(m.values.astype(float), cmap="Reds", vmin=0, vmax=max(0.05, float(t["anomaly_rate"].max())),
                       aspect="auto")
        ax.set_xticks(range(len(m.columns)), m.columns, rotation=20, fontsize=8)
        ax.set_yticks(range(len(m.index)), m.index, fontsize=8)
        for i in range(len(m.index)):
            for j in range(len(m.columns)):
                v, k = m.values[i, j], n.values[i, j]
                if pd.notna(v):
                    ax.text(j, i, f"{v:.0%} ({int(k)})", ha="center", va="center", fontsize=7)
        fig.colorbar(im, ax=ax, label="anomaly rate")
        ax.set_title("Anomaly rate: fault mix x configuration (runs)")
        _save(r, fig, "heatmap.png", "Anomaly heat map, fault mix x configuration")


def _save(r: Report, fig, name: str, title: str) -> None:
    fig.tight_layout()
    fig.savefig(r.out / name, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    r.plots.append((name, title))


def write_index(r: Report, corpus: str, n_runs: int) -> None:
    parts = [f"<!doctype html><meta charset='utf-8'><title>kafkacheck analysis of {html.escape(corpus)}</title>",
             "<style>body{font:14px sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
             "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}"
             "td:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd;margin:6px 0}</style>",
             f"<h1>Corpus analysis</h1><p>{n_runs} runs from <code>{html.escape(corpus)}</code>. "
             "Tables as CSV and Markdown beside this page; every anomaly instance in "
             "<code>anomalies.parquet</code>.</p>"]
    for name, title in r.plots:
        parts.append(f"<h2>{html.escape(title)}</h2><img src='{name}' alt='{html.escape(title)}'>")
    for name, pdf in r.tables.items():
        title = (r.out / f"{name}.md").read_text().splitlines()[0].lstrip("# ")
        body = pdf.head(200).to_html(index=False, border=0, na_rep="") if len(pdf) else "<p>none</p>"
        more = f"<p>{len(pdf)} rows; all in <a href='{name}.csv'>{name}.csv</a></p>" if len(pdf) > 200 else ""
        parts.append(f"<h2>{html.escape(title)}</h2><p><a href='{name}.csv'>CSV</a> · "
                     f"<a href='{name}.md'>Markdown</a></p>{body}{more}")
    parts.append("<h2>Job times</h2><table><tr><th>job</th><th>seconds</th></tr>"
                 + "".join(f"<tr><td>{html.escape(n)}</td><td>{s:.1f}</td></tr>" for n, s in r.timings) + "</table>")
    (r.out / "index.html").write_text("\n".join(parts))
    (r.out / "timings.json").write_text(json.dumps(dict(r.timings), indent=1))
