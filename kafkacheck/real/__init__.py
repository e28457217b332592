"""Real Kafka clients, below both the workloads and the conformance suite: what a workload's
real-client threads (:mod:`kafkacheck.workloads`) and ``kafkacheck conform``'s cases
(:mod:`kafkacheck.conform`) drive a broker with over TCP.

* :mod:`~kafkacheck.real.clients` -- kafka-python and confluent-kafka behind the one small
  interface the cases use, every call with a timeout;
* :mod:`~kafkacheck.real.handles`, :mod:`~kafkacheck.real.share_handles` -- the workloads'
  client handles (producers, transactional producers, consumers, group and share-group members);
* :mod:`~kafkacheck.real.java`, :mod:`~kafkacheck.real.java_clients` -- Apache Kafka's Java
  client through a driver process built from ``java/*.java``, with the same faces;
  :mod:`~kafkacheck.real.kafka_dist` -- the Apache Kafka jars it (and ``--spawn kafka``) runs;
* :mod:`~kafkacheck.real.kinds` -- ``--client``: which of them drives the cases and the workload;
* :mod:`~kafkacheck.real.real_run` -- what every workload's real-client threads share, and how
  their ops are recorded (:mod:`~kafkacheck.real.wall_history`), by Jepsen's rules;
* :mod:`~kafkacheck.real.final_read` -- after healing, every partition read to its end;
* :mod:`~kafkacheck.real.client_debug` -- what a stalled client thread was doing.

Nothing here imports :mod:`kafkacheck.workloads` or :mod:`kafkacheck.conform`
(``tests/test_layers.py``): they import it.
"""
