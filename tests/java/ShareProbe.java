// Kafka's own share consumer (KafkaShareConsumer, kafka-clients 4.3.1) driven the ways the
// share-group tests need, run with Java's single-file source launcher (no build step):
//
//   java -cp <kafka jars> ShareProbe.java BOOTSTRAP GROUP TOPIC MODE COUNT DEADLINE_MS
//
// MODE
//   accept-all    two consumers (-Dprobe.consumers=N: N) in threads of the group poll and
//                 accept until COUNT distinct records were delivered (or the deadline)
//   release-all   one consumer releases every record it gets, until COUNT deliveries and
//                 5 polls more (or the deadline)
//   accept-first  one consumer accepts the first COUNT records it gets, releases the rest,
//                 commits and closes
//
// Each delivery is one line on stdout: "D <consumer> <offset> <deliveryCount> <value>
// <partition>", each acknowledgement the broker confirmed "C <consumer> <offset> <partition>"
// (accept-all); "DONE" ends the run. Acknowledgements are explicit and committed with
// commitSync. With several bootstrap servers (gateways), a consumer whose brokers all went
// away bootstraps again (-Dprobe.rebootstrapMs: after that long without metadata).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareProbe {
    static final Set<String> seen = ConcurrentHashMap.newKeySet();

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group, String id) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", id);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", System.getProperty("probe.maxPoll", "20"));
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        String rebootstrapMs = System.getProperty("probe.rebootstrapMs");
        if (rebootstrapMs != null) {
            p.put("metadata.recovery.strategy", "rebootstrap");
            p.put("metadata.recovery.rebootstrap.trigger.ms", rebootstrapMs);
        }
        return new KafkaShareConsumer<>(p);
    }

    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static void delivered(String name, ConsumerRecord<String, String> r) {
        seen.add(r.partition() + ":" + r.offset());
        print("D " + name + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1) + " " + r.value()
              + " " + r.partition());
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);
        }
        print("DONE");
        System.exit(0);  // a consumer thread still polling must not keep the JVM up
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], mode = args[3];
        int count = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);
        switch (mode) {
            case "accept-all": {
                int consumers = Integer.parseInt(System.getProperty("probe.consumers", "2"));
                ExecutorService pool = Executors.newFixedThreadPool(consumers);
                List<Future<?>> runs = new ArrayList<>();
                for (int i = 1; i <= consumers; i++) {
                    String name = "c" + i;
                    runs.add(pool.submit(() -> {
                        try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, name)) {
                            c.subscribe(List.of(topic));
                            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                                List<String> acked = new ArrayList<>();
                                try {
                                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                                        delivered(name, r);
                                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                                        acked.add(r.offset() + " " + r.partition());
                                    }
                                    boolean failed = false;
                                    for (Optional<org.apache.kafka.common.KafkaException> e : c.commitSync().values()) {
                                        failed |= e.isPresent();
                                    }
                                    // "C": the broker said these acknowledgements are done.
                                    if (!failed) for (String at : acked) print("C " + name + " " + at);
                                } catch (org.apache.kafka.common.KafkaException e) {
                                    print("X " + name + " " + e);  // e.g. the broker went away
                                }
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> run : runs) run.get();
                pool.shutdown();
                break;
            }
            case "release-all": {
                // COUNT deliveries are expected (records x the delivery limit); a few polls
                // more then show any delivery past the limit.
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, "c1")) {
                    c.subscribe(List.of(topic));
                    int deliveries = 0, pollsAfter = 0;
                    while (System.currentTimeMillis() < deadline && pollsAfter < 5) {
                        ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<String, String> r : records) {
                            delivered("c1", r);
                            c.acknowledge(r, AcknowledgeType.RELEASE);
                            deliveries++;
                        }
                        c.commitSync();
                        if (deliveries >= count) pollsAfter++;
                    }
                }
                break;
            }
            case "accept-first": {
                try (KafkaShareConsumer<String, String> c = consumer(bootstrap, group, "c1")) {
                    c.subscribe(List.of(topic));
                    int accepted = 0;
                    while (accepted == 0 && System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                            delivered("c1", r);
                            boolean accept = accepted < count;
                            c.acknowledge(r, accept ? AcknowledgeType.ACCEPT : AcknowledgeType.RELEASE);
                            if (accept) {
                                accepted++;
                                print("A c1 " + r.offset());
                            }
                        }
                    }
                    Map<?, Optional<org.apache.kafka.common.KafkaException>> results = c.commitSync();
                    for (Optional<org.apache.kafka.common.KafkaException> e : results.values()) {
                        e.ifPresent(ex -> print("E " + ex));
                    }
                }
                break;
            }
            default:
                throw new IllegalArgumentException("mode " + mode);
        }
    }
}
