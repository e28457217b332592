// The Java client driver of `kafkacheck conform --client java`: Kafka's own Java client
// (kafka-clients) behind a line protocol, so that kafkacheck's cases and workloads, written
// in Python, can drive it.
//
// Protocol: one JSON object per line on stdin, {"id": N, "op": "producer.send", "h": HANDLE, ...};
// one answer per request on stdout, {"id": N, "ok": RESULT} or {"id": N, "error": "ERROR_NAME:
// ExceptionClass: message"}. ERROR_NAME is Kafka's error name for the exception
// (Errors.forException), so Python can tell NOT_ENOUGH_REPLICAS from a timeout. Bytes travel
// as base64. Requests for one handle run in order on that handle's own thread (a
// KafkaConsumer is single-threaded); different handles run in parallel. Nothing here decides
// a verdict: the driver does what it is told and reports what the client said.
//
// Ops: admin.{new, create_topic, delete_records, alter_group_configs, close}; producer.{new, send,
// init, begin, commit, abort, flush, send_offsets, close}; consumer.{new, assign, seek_to_beginning,
// seek_to_committed, subscribe, poll, positions, assignment, commit, committed, offsets,
// group_metadata, close}; share.{new, subscribe, poll, acknowledge, commit, close}: KIP-932 share
// consumers, served by KafkacheckShare.java (see there).
//
// Built by kafkacheck (kafkacheck/real/java.py) with javac against the jars of the Kafka
// version in use; it needs only kafka-clients and jackson-databind, both on that classpath.
// KafkacheckShare.java is compiled with it only against kafka-clients 4.1 and later, and loaded
// by name on the first share op: built against an older kafka-clients, the driver answers the
// share ops UNSUPPORTED_VERSION and serves the rest as before.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkacheckDriver {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    private static final AtomicInteger NEXT_HANDLE = new AtomicInteger(1);
    private static final Map<Integer, Handle> HANDLES = new ConcurrentHashMap<>();
    private static final ExecutorService CREATORS = Executors.newCachedThreadPool(daemon("kafkacheck-new"));

    /** The share consumers' ops: KafkacheckShare, compiled only against kafka-clients 4.1+. */
    interface ShareOps {
        Object create(Properties props);

        Object perform(String op, Object member, JsonNode req, Duration timeout) throws Exception;

        void close(Object member, Duration timeout);
    }

    private static volatile ShareOps shareOps;

    /** KafkacheckShare, loaded on first use; UNSUPPORTED_VERSION when this build has none. */
    private static ShareOps share() throws Exception {
        if (shareOps == null) {
            synchronized (KafkacheckDriver.class) {
                if (shareOps == null) {
                    try {
                        shareOps = (ShareOps) Class.forName("KafkacheckShare").getDeclaredConstructor().newInstance();
                    } catch (ClassNotFoundException | NoClassDefFoundError e) {
                        throw new UnsupportedVersionException("share consumers (KIP-932) need kafka-clients 4.1 or "
                                + "later: this driver was built against an older one, without KafkacheckShare");
                    }
                }
            }
        }
        return shareOps;
    }

    /** A client object and the thread that serves it. */
    private static final class Handle {
        final Object client;
        final ExecutorService thread;
        final List<ObjectNode> rebalanceLog = new ArrayList<>();  // consumer: listener events since the last poll

        Handle(Object client, int id) {
            this.client = client;
            this.thread = Executors.newSingleThreadExecutor(daemon("kafkacheck-h" + id));
        }
    }

    public static void main(String[] args) throws Exception {
        OUT.println("{\"ready\": true}");
        OUT.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode req;
            try {
                req = JSON.readTree(line);
            } catch (Exception e) {
                answer(-1, null, "INVALID_REQUEST: unreadable request line");
                continue;
            }
            dispatch(req);
        }
        System.exit(0);  // stdin closed: kafkacheck is gone, so are we
    }

    private static void dispatch(JsonNode req) {
        long id = req.path("id").asLong(-1);
        String op = req.path("op").asText("");
        if (op.endsWith(".new")) {
            CREATORS.submit(() -> serve(id, () -> create(op, req)));
            return;
        }
        Handle h = HANDLES.get(req.path("h").asInt(-1));
        if (h == null) {
            answer(id, null, "INVALID_REQUEST: no handle " + req.path("h"));
            return;
        }
        h.thread.submit(() -> serve(id, () -> perform(op, h, req)));
    }

    private interface Body {
        Object call() throws Exception;
    }

    private static void serve(long id, Body body) {
        try {
            answer(id, body.call(), null);
        } catch (Throwable t) {
            answer(id, null, describe(t));
        }
    }

    private static synchronized void answer(long id, Object ok, String error) {
        ObjectNode out = JSON.createObjectNode();
        out.put("id", id);
        if (error != null) out.put("error", error);
        else out.set("ok", JSON.valueToTree(ok));
        OUT.println(out.toString());
        OUT.flush();
    }

    static String describe(Throwable t) {
        Throwable cause = t;
        while ((cause instanceof ExecutionException || cause instanceof java.util.concurrent.CompletionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        String name = Errors.forException(cause).name();
        if (cause instanceof org.apache.kafka.common.errors.TimeoutException) name = "REQUEST_TIMED_OUT";
        return name + ": " + cause.getClass().getSimpleName() + ": " + cause.getMessage();
    }

    // ------------------------------------------------------------ creation

    private static Object create(String op, JsonNode req) throws Exception {
        Properties props = new Properties();
        for (Map.Entry<String, JsonNode> e : req.path("conf").properties()) props.put(e.getKey(), e.getValue().asText());
        Object client;
        switch (op) {
            case "admin.new" -> client = Admin.create(props);
            case "producer.new" -> client = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
            case "consumer.new" -> client = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            case "share.new" -> client = share().create(props);
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
        int id = NEXT_HANDLE.getAndIncrement();
        HANDLES.put(id, new Handle(client, id));
        return id;
    }

    // ------------------------------------------------------------ operations

    @SuppressWarnings({"unchecked", "deprecation"})  // close(Duration): CloseOptions is only in 4.1+
    private static Object perform(String op, Handle h, JsonNode req) throws Exception {
        Duration timeout = Duration.ofMillis(req.path("timeout_ms").asLong(20_000));
        if (op.endsWith(".close")) {
            HANDLES.remove(req.path("h").asInt());
            try {
                if (op.startsWith("share.")) share().close(h.client, timeout);
                else if (h.client instanceof KafkaProducer<?, ?> p) p.close(timeout);
                else if (h.client instanceof KafkaConsumer<?, ?> c) c.close(timeout);
                else if (h.client instanceof Admin a) a.close(timeout);
            } finally {
                h.thread.shutdown();
            }
            return null;
        }
        if (op.startsWith("admin.")) return admin(op, (Admin) h.client, req, timeout);
        if (op.startsWith("producer.")) return producer(op, (KafkaProducer<byte[], byte[]>) h.client, req, timeout);
        if (op.startsWith("consumer.")) return consumer(op, h, (KafkaConsumer<byte[], byte[]>) h.client, req, timeout);
        if (op.startsWith("share.")) return share().perform(op, h.client, req, timeout);
        throw new IllegalArgumentException("unknown op " + op);
    }

    private static Object admin(String op, Admin a, JsonNode req, Duration timeout) throws Exception {
        switch (op) {
            case "admin.create_topic" -> {
                Map<String, String> configs = new HashMap<>();
                for (Map.Entry<String, JsonNode> e : req.path("configs").properties()) configs.put(e.getKey(), e.getValue().asText());
                NewTopic topic = new NewTopic(req.path("topic").asText(), req.path("partitions").asInt(),
                        (short) req.path("rf").asInt()).configs(configs);
                a.createTopics(List.of(topic)).all().get(timeout.toMillis(), TimeUnit.MILLISECONDS);
                return null;
            }
            case "admin.delete_records" -> {
                TopicPartition tp = new TopicPartition(req.path("topic").asText(), req.path("partition").asInt());
                var result = a.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(req.path("offset").asLong())));
                return result.lowWatermarks().get(tp).get(timeout.toMillis(), TimeUnit.MILLISECONDS).lowWatermark();
            }
            case "admin.alter_group_configs" -> {
                // a group's dynamic configs (share.auto.offset.reset, ...): ConfigResource.Type.GROUP,
                // named by its name so that the driver still compiles against kafka-clients 3.x
                ConfigResource.Type group;
                try {
                    group = ConfigResource.Type.valueOf("GROUP");
                } catch (IllegalArgumentException e) {
                    throw new UnsupportedVersionException("GROUP config resources need kafka-clients 4.0 or later");
                }
                List<AlterConfigOp> ops = new ArrayList<>();
                for (Map.Entry<String, JsonNode> e : req.path("configs").properties()) {
                    ops.add(new AlterConfigOp(new ConfigEntry(e.getKey(), e.getValue().asText()), AlterConfigOp.OpType.SET));
                }
                a.incrementalAlterConfigs(Map.of(new ConfigResource(group, req.path("group").asText()), ops))
                        .all().get(timeout.toMillis(), TimeUnit.MILLISECONDS);
                return null;
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static Object producer(String op, KafkaProducer<byte[], byte[]> p, JsonNode req, Duration timeout)
            throws Exception {
        switch (op) {
            case "producer.send" -> {
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                List<String> early = new ArrayList<>();
                for (JsonNode r : req.path("records")) {
                    List<Header> headers = new ArrayList<>();
                    for (JsonNode hd : r.path("headers")) headers.add(new RecordHeader(hd.get(0).asText(), bytes(hd.get(1))));
                    ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(r.path("topic").asText(),
                            r.path("partition").asInt(), bytes(r.get("key")), bytes(r.get("value")), headers);
                    try {
                        futures.add(p.send(rec));
                        early.add(null);
                    } catch (Exception e) {  // refused before it was sent (a fenced or failed transaction)
                        futures.add(null);
                        early.add(describe(e));
                    }
                }
                long deadline = System.nanoTime() + timeout.toNanos();
                ArrayNode out = JSON.createArrayNode();
                for (int i = 0; i < futures.size(); i++) {
                    ObjectNode o = out.addObject();
                    if (futures.get(i) == null) {
                        o.put("error", early.get(i));
                        continue;
                    }
                    try {
                        long left = Math.max(0, deadline - System.nanoTime());
                        o.put("offset", futures.get(i).get(left, TimeUnit.NANOSECONDS).offset());
                    } catch (java.util.concurrent.TimeoutException e) {
                        o.put("error", "REQUEST_TIMED_OUT: no answer within " + timeout.toMillis() + " ms");
                    } catch (Exception e) {
                        o.put("error", describe(e));
                    }
                }
                return out;
            }
            case "producer.init" -> { p.initTransactions(); return null; }
            case "producer.begin" -> { p.beginTransaction(); return null; }
            case "producer.commit" -> { p.commitTransaction(); return null; }  // bounded by max.block.ms
            case "producer.abort" -> { p.abortTransaction(); return null; }
            case "producer.flush" -> { p.flush(); return null; }
            case "producer.send_offsets" -> {
                // the consumer's group metadata, read on the consumer's own thread
                Handle ch = HANDLES.get(req.path("consumer").asInt(-1));
                if (ch == null || !(ch.client instanceof KafkaConsumer<?, ?> c)) {
                    throw new IllegalArgumentException("send_offsets needs a consumer handle");
                }
                ConsumerGroupMetadata meta = ch.thread.submit(c::groupMetadata).get();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (JsonNode o : req.path("offsets")) offsets.put(tp(o), new OffsetAndMetadata(o.get(2).asLong()));
                p.sendOffsetsToTransaction(offsets, meta);
                return meta.generationId();  // the generation (member epoch) the offsets went with
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private static Object consumer(String op, Handle h, KafkaConsumer<byte[], byte[]> c, JsonNode req, Duration timeout)
            throws Exception {
        switch (op) {
            case "consumer.assign" -> {
                List<TopicPartition> tps = new ArrayList<>();
                for (JsonNode t : req.path("tps")) tps.add(tp(t));
                c.assign(tps);
                if (req.path("from_beginning").asBoolean(false)) c.seekToBeginning(tps);
                for (JsonNode o : req.path("seek")) c.seek(tp(o), o.get(2).asLong());
                return null;
            }
            case "consumer.seek_to_beginning" -> { c.seekToBeginning(c.assignment()); return null; }
            case "consumer.seek_to_committed" -> {
                // back to the group's committed offsets in every partition the consumer has (with
                // read_committed, the OffsetFetch waits for a transaction still carrying offsets)
                java.util.Set<TopicPartition> owned = c.assignment();
                Map<TopicPartition, OffsetAndMetadata> got = owned.isEmpty() ? Map.of() : c.committed(owned, timeout);
                List<TopicPartition> none = new ArrayList<>();
                for (TopicPartition tp : owned) {
                    OffsetAndMetadata m = got.get(tp);
                    if (m == null) none.add(tp);
                    else c.seek(tp, m.offset());
                }
                if (!none.isEmpty()) c.seekToBeginning(none);  // nothing committed: auto.offset.reset=earliest
                return null;
            }
            case "consumer.subscribe" -> {
                List<String> topics = new ArrayList<>();
                for (JsonNode t : req.path("topics")) topics.add(t.asText());
                c.subscribe(topics, new Listener(h, c));
                return null;
            }
            case "consumer.poll" -> {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(req.path("poll_ms").asLong(500)));
                int max = req.path("max").asInt(Integer.MAX_VALUE);
                ObjectNode out = JSON.createObjectNode();
                ArrayNode recs = out.putArray("records");
                Map<TopicPartition, Long> rewind = new HashMap<>();  // records past max are read again next time
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (recs.size() >= max || rewind.containsKey(tp)) {
                        rewind.putIfAbsent(tp, r.offset());
                        continue;
                    }
                    ArrayNode a = recs.addArray();
                    a.add(r.topic()).add(r.partition()).add(r.offset()).add(b64(r.key())).add(b64(r.value()));
                    ArrayNode hs = a.addArray();
                    for (Header hd : r.headers()) hs.addArray().add(hd.key()).add(b64(hd.value()));
                }
                rewind.forEach(c::seek);
                out.set("log", JSON.valueToTree(h.rebalanceLog));
                h.rebalanceLog.clear();
                // a group member's generation (with group.protocol=consumer its member epoch) after the poll
                if (req.path("with_generation").asBoolean(false)) out.put("generation", c.groupMetadata().generationId());
                return out;
            }
            case "consumer.positions" -> {
                ArrayNode out = JSON.createArrayNode();
                for (TopicPartition tp : c.assignment()) {
                    out.addArray().add(tp.topic()).add(tp.partition()).add(c.position(tp, timeout));
                }
                return out;
            }
            case "consumer.assignment" -> {
                ArrayNode out = JSON.createArrayNode();
                for (TopicPartition tp : c.assignment()) out.addArray().add(tp.topic()).add(tp.partition());
                return out;
            }
            case "consumer.commit" -> {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (JsonNode o : req.path("offsets")) offsets.put(tp(o), new OffsetAndMetadata(o.get(2).asLong()));
                c.commitSync(offsets, timeout);
                return null;
            }
            case "consumer.committed" -> {
                java.util.Set<TopicPartition> tps = new java.util.HashSet<>();
                for (JsonNode t : req.path("tps")) tps.add(tp(t));
                Map<TopicPartition, OffsetAndMetadata> got = c.committed(tps, timeout);
                ArrayNode out = JSON.createArrayNode();
                for (TopicPartition tp : tps) {
                    OffsetAndMetadata m = got.get(tp);
                    ArrayNode a = out.addArray().add(tp.topic()).add(tp.partition());
                    if (m == null) a.addNull(); else a.add(m.offset());
                }
                return out;
            }
            case "consumer.offsets" -> {
                List<TopicPartition> tps = new ArrayList<>();
                for (JsonNode t : req.path("tps")) tps.add(tp(t));
                Map<TopicPartition, Long> begin = c.beginningOffsets(tps, timeout);
                Map<TopicPartition, Long> end = c.endOffsets(tps, timeout);
                ArrayNode out = JSON.createArrayNode();
                for (TopicPartition tp : tps) {
                    out.addArray().add(tp.topic()).add(tp.partition()).add(begin.get(tp)).add(end.get(tp));
                }
                return out;
            }
            case "consumer.group_metadata" -> {
                ConsumerGroupMetadata m = c.groupMetadata();
                ObjectNode out = JSON.createObjectNode();
                out.put("group_id", m.groupId());
                out.put("generation", m.generationId());
                out.put("member_id", m.memberId());
                if (m.groupInstanceId().isPresent()) out.put("instance_id", m.groupInstanceId().get());
                else out.putNull("instance_id");
                return out;
            }
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
    }

    /** Rebalance callbacks, with the generation the member holds when they run. */
    private static final class Listener implements ConsumerRebalanceListener {
        private final Handle h;
        private final KafkaConsumer<byte[], byte[]> c;

        Listener(Handle h, KafkaConsumer<byte[], byte[]> c) {
            this.h = h;
            this.c = c;
        }

        private void note(String type, Collection<TopicPartition> tps) {
            ObjectNode e = JSON.createObjectNode();
            e.put("type", type);
            ArrayNode keys = e.putArray("keys");
            tps.stream().map(tp -> tp.topic() + ":" + tp.partition()).sorted().forEach(keys::add);
            int generation = -1;
            try {
                generation = c.groupMetadata().generationId();
            } catch (Exception ignored) {
                // no group metadata while the member is being torn down
            }
            e.put("generation", generation);
            h.rebalanceLog.add(e);
        }

        @Override public void onPartitionsRevoked(Collection<TopicPartition> tps) { note("revoked", tps); }
        @Override public void onPartitionsAssigned(Collection<TopicPartition> tps) { note("assigned", tps); }
        @Override public void onPartitionsLost(Collection<TopicPartition> tps) { note("lost", tps); }
    }

    // ------------------------------------------------------------ helpers

    private static TopicPartition tp(JsonNode a) {
        return new TopicPartition(a.get(0).asText(), a.get(1).asInt());
    }

    private static byte[] bytes(JsonNode n) {
        return n == null || n.isNull() ? null : Base64.getDecoder().decode(n.asText());
    }

    private static String b64(byte[] b) {
        return b == null ? null : Base64.getEncoder().encodeToString(b);
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }
}
