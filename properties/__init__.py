"""The guarantees: pure checkers over histories, and the formal model (the drivers that
produce histories, the workloads and their Hypothesis machines, are :mod:`kafkacheck.workloads`).

* :mod:`~properties.checker` -- the history checker (``check``, its engines, the verdict) over
  every family below; :mod:`~properties.check_table` -- its table of checks, with what Kafka
  allows and what it does not; :mod:`~properties.judging` -- the run config and result they share;
  :mod:`~properties.config_checks` -- its own checks that need the run's config;
* :mod:`~properties.analysis` (ops and version orders), :mod:`~properties.jepsen_checks` (Jepsen's
  Kafka anomalies and ours), :mod:`~properties.cycles` (Elle-style dependency cycles),
  :mod:`~properties.group_checks` (consumer groups), :mod:`~properties.compaction_checks`,
  :mod:`~properties.linearizable` (each partition's log, through :mod:`linearizability`);
* :mod:`properties.formal` -- the z3 model of replication and transactions.
"""
