"""PySpark jobs over Parquet corpora of many runs (``kafkacheck corpus`` writes them,
``kafkacheck analyze`` runs these jobs).

* :mod:`~spark_analysis.session` -- the Spark session (local mode, or a given master);
* :mod:`~spark_analysis.detect` -- corpus-wide anomaly detectors over the raw tables (ops,
  micro-ops, events), each the Spark twin of a checker family;
* :mod:`~spark_analysis.jobs` -- rates by fault, fault mix, workload, configuration and bug
  switch; time from fault to first anomaly; per-run dependency-cycle checks
  (``applyInPandas``); the agreement between Spark's findings and the per-run verdicts;
* :mod:`~spark_analysis.report` -- every job run and written: CSV and Markdown tables, PNG
  plots and an ``index.html``.

Nothing is imported here, so that the rest of kafkacheck never needs PySpark.
"""
