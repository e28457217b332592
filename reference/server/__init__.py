"""The reference broker over TCP: the only I/O shell of the sans-IO engine.

* :mod:`~reference.server.protocol` -- the Kafka wire protocol through kafka-python's
  message classes, and the API versions served;
* :mod:`~reference.server.gateway` -- one client connection: frames, limits, order, and the
  engine calls its handlers make;
* :mod:`~reference.server.apis`, :mod:`~reference.server.group_apis` -- the handler of each
  wire API: requests to engine messages and back;
* :mod:`~reference.server.host` -- runs engine nodes on an asyncio loop in real time;
* :mod:`~reference.server.peers` -- engine messages between the processes of a cluster;
* :mod:`~reference.server.storage` -- the engine's files in a data directory;
* :mod:`~reference.server.cluster` -- a served cluster (``kafkacheck serve``);
* ``python -m reference.server`` -- one process of a cluster (started by ``kafkacheck serve``).
"""
