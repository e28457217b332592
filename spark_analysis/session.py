"""The SparkSession every job uses: no configuration needed on one machine, and whatever
``--master`` or ``spark-submit`` says on a cluster.

On its own it runs Spark in local mode on every core, bound to 127.0.0.1 (``SPARK_LOCAL_IP``
and the driver's host and bind address), with the web UI off, quiet logs, adaptive query
execution with eight shuffle partitions a core (Spark's 200 is for clusters; AQE merges the
small ones, and big sorts stop spilling), about ten input splits a core, and the throughput
garbage collector; benchmarks/spark_speed.py measured each choice. Settings that ``spark-submit --conf`` or
``spark-defaults.conf`` already made are never overridden: a cluster's configuration wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
}
_LOCAL = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "4g",
}


def get_spark(master: str | None = None, app_name: str = "kafkacheck", shuffle_partitions: int | None = None):
    """The active session, or a new one: ``master`` (else spark-submit's, else local[*])."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = SparkConf()  # picks up spark-submit's --master and --conf
    if master:
        conf.setMaster(master)
    local = (conf.get("spark.master", None) or "local[*]").startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers run this interpreter (the one with kafkacheck installed), not the
        # first python3 on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        conf.setIfMissing("spark.master", "local[*]")
        for k, v in _LOCAL.items():
            conf.setIfMissing(k, v)
        cores = os.cpu_count() or 2
        # eight a core (AQE coalesces small shuffles; 50M-row sorts in 4 partitions spilled)
        conf.setIfMissing("spark.sql.shuffle.partitions", str(shuffle_partitions or min(200, 8 * cores)))
        # input splits: about ten per core whatever the corpus's size (Spark's default packs a
        # corpus into one split per core); smaller partial aggregations and even stages
        conf.setIfMissing("spark.sql.files.minPartitionNum", str(10 * cores))
    for k, v in _DEFAULTS.items():
        conf.setIfMissing(k, v)
    log4j = Path(__file__).with_name("log4j2.properties")
    # the throughput collector: batch jobs, no latency goal (15-25% faster than G1 here)
    gc = " -XX:+UseParallelGC" if local else ""
    conf.setIfMissing("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}{gc}")
    conf.setIfMissing("spark.app.name", app_name)
    if local and "PYSPARK_GATEWAY_PORT" not in os.environ:
        _start_jvm_in_own_session(conf)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _start_jvm_in_own_session(conf) -> None:
    """Launch Spark's JVM (and so its Python workers) outside the terminal's process group.

    Ctrl-C in a terminal signals the whole foreground group: the Python workers, which restore
    Python's SIGINT handler, die mid-task and the JVM logs a failed task for each one before
    the driver has said anything. In a session of its own the JVM only hears of an interruption
    from the driver, and it still exits with the driver: PythonGatewayServer exits when its
    standard input, a pipe from this process, closes.
    """
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext(conf=conf, gateway=gateway)

