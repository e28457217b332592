"""The conformance suite against a real broker over TCP (``kafkacheck conform``:
:mod:`kafkacheck.commands.conform`).

* :mod:`~kafkacheck.conform.targets` -- the broker (``--bootstrap``, ``--spawn reference``,
  ``--spawn tansu``, ``--spawn kafka``) and the APIs it advertises;
* :mod:`~kafkacheck.conform.kafka_dist` -- Apache Kafka's jars: a release from Maven Central, or
  the distribution or build of ``--kafka-home``;
* :mod:`~kafkacheck.conform.apache_kafka` -- a KRaft cluster run from those jars;
* :mod:`~kafkacheck.conform.matrix` -- one command over several Kafka versions: the table of verdicts;
* :mod:`~kafkacheck.conform.clients` -- kafka-python and confluent-kafka behind one small
  interface, every call with a timeout;
* :mod:`~kafkacheck.conform.cases` -- the catalogue of cases, each a documented guarantee;
* :mod:`~kafkacheck.conform.report` -- terminal table, report.json, JUnit XML, HTML.
"""

