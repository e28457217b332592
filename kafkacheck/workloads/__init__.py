"""Workloads: client processes that run operations and record them as history."""

WORKLOADS = {
    "queue": "sends and polls; the producer never retries a send whose outcome is unknown",
    "idempotent": "sends and polls with enable.idempotence: retries of every kind, up to 5 "
                  "batches in flight, and no duplicate may appear",
    "txn": "Jepsen-style transactions of 1-4 sends and polls (read_committed), about 15% "
           "aborted on purpose",
    "eos": "consume-transform-produce: idempotent producers write an input topic; processors "
           "copy it to an output topic in transactions with sendOffsetsToTransaction",
    "groups": "consumer-group members (subscribe, --assignor) that poll, commit, crash and leave, "
              "paused past their session timeouts, while a producer writes",
    "compaction": "keyed updates and tombstones on a compacted topic (small segments, an eager "
                  "cleaner); readers seek back to the beginning",
}
TXN_WORKLOADS = ("txn", "eos")
# workloads whose producers are idempotent (Kafka then requires acks=all)
IDEMPOTENT_WORKLOADS = ("idempotent", "groups", "compaction", *TXN_WORKLOADS)
