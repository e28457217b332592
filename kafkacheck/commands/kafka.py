"""``kafkacheck kafka``: Apache Kafka's jars (and the Java client driver) fetched into the cache."""

from __future__ import annotations

import argparse

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_UNKNOWN, EXIT_VALID, UsageError
from kafkacheck.real.kafka_dist import KafkaDist, KafkaUnavailable, KafkaVersionUnknown, check_version


def add_parser(sub: argparse._SubParsersAction) -> None:
    kaf = sub.add_parser(
        "kafka", help=SUMMARIES["kafka"],
        description="kafkacheck conform --spawn kafka runs Apache Kafka from jars that Maven fetches from Maven "
                    "Central once into a cache ($KAFKACHECK_CACHE, else $XDG_CACHE_HOME/kafkacheck, else "
                    "~/.cache/kafkacheck). 'kafkacheck kafka fetch' fills that cache ahead of time (CI does it "
                    "before the tests) and builds the Java driver of --client java; 'kafkacheck kafka where' "
                    "prints the cache directory. Exit 0 when done, 2 when Java or Maven is missing or the "
                    "download fails, 3 for a version Maven Central does not have.")
    kaf.add_argument("action", choices=["fetch", "where"], help="fetch: download and build; where: print the cache")
    kaf.add_argument("--kafka-version", default="4.3.1", metavar="V", help="the Apache Kafka version (default 4.3.1)")


def main(args: argparse.Namespace) -> int:
    import sys

    try:
        dist = KafkaDist(check_version(args.kafka_version))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.action == "where":
        print(dist.home)
        return EXIT_VALID if dist.fetched else EXIT_UNKNOWN
    from kafkacheck.real.java import build_driver

    try:
        dist.fetch()
        driver = build_driver(dist)
    except KafkaVersionUnknown as e:
        raise UsageError(str(e)) from None
    except KafkaUnavailable as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"Apache Kafka {dist.version}: {dist.libs}; the Java client driver: {driver}")
    return EXIT_VALID
