"""The conformance suite against a real broker over TCP (``kafkacheck conform``:
:mod:`kafkacheck.commands.conform`).

* :mod:`~kafkacheck.conform.targets` -- the broker (``--bootstrap``, ``--spawn reference``,
  ``--spawn tansu``, ``--spawn kafka``) and the APIs it advertises;
* :mod:`~kafkacheck.conform.apache_kafka` -- a KRaft cluster run from Apache Kafka's jars
  (:mod:`kafkacheck.real.kafka_dist`: a release from Maven Central, or ``--kafka-home``'s);
* :mod:`~kafkacheck.conform.options` -- what one run is asked to do, checked once by the command;
* :mod:`~kafkacheck.conform.suite` -- one run: the target, the cases, the workload, the reports;
* :mod:`~kafkacheck.conform.matrix` -- one command over several Kafka versions: the table of verdicts;
* :mod:`~kafkacheck.conform.cases` -- the catalogue of cases, each a documented guarantee, asked
  of the clients of :mod:`kafkacheck.real.clients`;
* :mod:`~kafkacheck.conform.workload` -- a workload of :mod:`kafkacheck.workloads` with real
  clients (:mod:`kafkacheck.real`) under the nemesis of :mod:`~kafkacheck.conform.real_nemesis`;
* :mod:`~kafkacheck.conform.report` -- terminal table, report.json, JUnit XML, HTML.

The real clients are :mod:`kafkacheck.real`, below both this package and the workloads; this
package imports the workloads, never the other way round, and no command module
(``tests/test_layers.py``).
"""

