"""kafkacheck: the application (command line, targets, workloads, runner, reports)."""

__version__ = "0.1.0"
