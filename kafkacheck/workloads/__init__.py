"""Workloads: client processes that drive a cluster and record Jepsen-style ops."""
