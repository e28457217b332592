"""Formal models of the protocol in z3: replication (:mod:`.replication`) and transactions
(:mod:`.transactions`), checked by bounded model checking and k-induction (:mod:`.bmc`)."""
