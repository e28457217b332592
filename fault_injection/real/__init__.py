"""Faults on real brokers, with real time, threads, processes and sockets (the simulator, one
level up, has none of them):

* :mod:`~fault_injection.real.proxy` -- a TCP fault proxy in front of a broker (cut, delay,
  reset its clients' connections; read Kafka frames and hold one request back);
* :mod:`~fault_injection.real.straggle` -- chooses such a request across a cluster's proxies and
  releases it late;
* :mod:`~fault_injection.real.processes` -- kill -9, SIGSTOP and restarts of local processes;
* :mod:`~fault_injection.real.netns` -- every node in a network namespace of its own:
  partitions, loss and slow links between nodes with nftables and tc.

Their names on the command line are ``kafkacheck conform --faults``
(:mod:`fault_injection.vocabulary`).
"""
