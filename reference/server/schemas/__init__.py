"""Message schemas, in Kafka's JSON schema language, of the APIs that kafka-python's
``kafka.protocol`` does not carry (KIP-848's ConsumerGroupHeartbeat and
ConsumerGroupDescribe). :mod:`reference.server.kip848_messages` loads them into
kafka-python's message classes, which then encode and decode them like every other API.
Written for kafkacheck from the protocol's documentation (KIP-848); field order and
versions are the wire's."""
