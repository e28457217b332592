"""PySpark jobs over Parquet corpora of many runs: a later issue.

Nothing is implemented here yet; the package exists so the layout of ARCHITECTURE.md is
complete and the build lists it.
"""
