// The share consumers (KIP-932) of kafkacheck's Java client driver (KafkacheckDriver.java): a
// KafkaShareConsumer in explicit acknowledgement mode behind the driver's "share.*" ops.
//
// Kept apart because KafkaShareConsumer's API (acknowledge(record, type), commitSync answering
// per partition, ConsumerRecord.deliveryCount(), share.acknowledgement.mode) is only in
// kafka-clients 4.1 and later: kafkacheck/real/java.py compiles this file only against those,
// and the driver loads it by name on the first share op, so a driver built against an older
// kafka-clients (3.x) runs every other op and answers the share ones UNSUPPORTED_VERSION.
//
// Ops (each on the member's own thread in the driver, as every handle's):
//   share.subscribe {topics}            -> null
//   share.poll      {timeout_ms}        -> [[topic, partition, offset, key, value, delivery count], ...]
//                                          (bytes as base64; the count -1 when the client has none)
//   share.acknowledge {topic, partition, offset, type: accept|release|reject} -> null
//                                          (local; the record must be one of the last poll's)
//   share.commit    {timeout_ms}        -> {"topic:partition": null | Kafka's error name, ...}
//                                          (commitSync(Duration): the partitions whose
//                                          acknowledgements were sent, and each one's outcome)
//   share.close     {timeout_ms}        -> null (close(Duration): leaves the share group)

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class KafkacheckShare implements KafkacheckDriver.ShareOps {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** A share consumer and the records of its last poll (Java acknowledges a ConsumerRecord). */
    private static final class Member {
        final KafkaShareConsumer<byte[], byte[]> consumer;
        Map<String, ConsumerRecord<byte[], byte[]>> polled = new HashMap<>();

        Member(KafkaShareConsumer<byte[], byte[]> consumer) {
            this.consumer = consumer;
        }
    }

    @Override
    public Object create(Properties props) {
        return new Member(new KafkaShareConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
    }

    @Override
    public Object perform(String op, Object member, JsonNode req, Duration timeout) {
        Member m = (Member) member;
        KafkaShareConsumer<byte[], byte[]> c = m.consumer;
        switch (op) {
            case "share.subscribe" -> {
                List<String> topics = new ArrayList<>();
                for (JsonNode t : req.path("topics")) topics.add(t.asText());
                c.subscribe(topics);
                return null;
            }
            case "share.poll" -> {
                // explicit mode: poll refuses (IllegalStateException) while a record of the
                // previous poll is unacknowledged; the records kept are then the previous ones
                ConsumerRecords<byte[], byte[]> records = c.poll(timeout);
                Map<String, ConsumerRecord<byte[], byte[]>> polled = new HashMap<>();
                ArrayNode out = JSON.createArrayNode();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    polled.put(key(r.topic(), r.partition(), r.offset()), r);
                    Optional<Short> count = r.deliveryCount();
                    out.addArray().add(r.topic()).add(r.partition()).add(r.offset()).add(b64(r.key()))
                            .add(b64(r.value())).add(count.isPresent() ? count.get() : -1);
                }
                m.polled = polled;
                return out;
            }
            case "share.acknowledge" -> {
                String k = key(req.path("topic").asText(), req.path("partition").asInt(), req.path("offset").asLong());
                ConsumerRecord<byte[], byte[]> r = m.polled.get(k);
                if (r == null) throw new IllegalStateException("record " + k + " is not one of the last poll's");
                c.acknowledge(r, AcknowledgeType.valueOf(req.path("type").asText().toUpperCase(Locale.ROOT)));
                return null;
            }
            case "share.commit" -> {
                Map<TopicIdPartition, Optional<KafkaException>> results = c.commitSync(timeout);
                ObjectNode out = JSON.createObjectNode();
                for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : results.entrySet()) {
                    String k = e.getKey().topic() + ":" + e.getKey().partition();
                    if (e.getValue().isPresent()) out.put(k, errorName(e.getValue().get()));
                    else out.putNull(k);
                }
                return out;
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
    }

    @Override
    public void close(Object member, Duration timeout) {
        ((Member) member).consumer.close(timeout);
    }

    /** Kafka's name for a partition's failure (a wrapper's cause when it is a bare KafkaException). */
    private static String errorName(Throwable t) {
        Throwable e = t;
        while (e.getClass() == KafkaException.class && e.getCause() != null) e = e.getCause();
        if (e instanceof org.apache.kafka.common.errors.TimeoutException) return "REQUEST_TIMED_OUT";
        Errors error = Errors.forException(e);
        if (error == Errors.UNKNOWN_SERVER_ERROR && !(e instanceof org.apache.kafka.common.errors.UnknownServerException)) {
            // not one of Kafka's errors: say which exception (an unknown outcome for the checker)
            return "UNKNOWN_SERVER_ERROR (" + e.getClass().getSimpleName() + ": " + e.getMessage() + ")";
        }
        return error.name();
    }

    private static String key(String topic, int partition, long offset) {
        return topic + ":" + partition + ":" + offset;
    }

    private static String b64(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }
}
