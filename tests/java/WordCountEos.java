// A Kafka Streams word count with processing.guarantee=exactly_once_v2 (kafka-streams 4.3.1,
// the jars `make kafka-streams` brings), for the tests that run it against seglog through
// faults. Compiled by the test fixture with javac and run as
//
//   java -cp <classes>:<kafka jars>:<streams jars> WordCountEos BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR [THREADS]
//
// THREADS: stream threads in this instance (1 unless given). Several instances of one APP_ID,
// each on a state dir of its own, share the work as one application (the fault campaign's
// streams workload runs two of two threads each).
// INPUT's values are lines of words separated by spaces; each word is re-keyed through a
// repartition topic ("APP_ID-words-repartition") and counted in a state store ("counts", its
// changelog "APP_ID-counts-changelog"); every new count is written to OUTPUT as key = the
// word, value = the count (a big-endian long, Kafka's LongSerializer). The record cache is off,
// so each occurrence of a word yields one output record: a reader of OUTPUT at read_committed
// must see, per word, exactly 1, 2, ..., its count, whatever crashed on the way.
//
// Stdout, one line each: "STATE <new state>" at every state change (the test waits for
// RUNNING), "ERROR <exception>" for an exception a stream thread died of (the thread is
// replaced: faults are expected to cost threads, not the run). The state dir is kept across
// restarts, so a restarted instance has the same process id and its producer the same
// transactional id (fencing the one it replaces).
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class WordCountEos {
    static synchronized void print(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5 && args.length != 6) {
            System.err.println(
                    "usage: WordCountEos BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR [THREADS]");
            System.exit(2);
        }
        int threads = args.length == 6 ? Integer.parseInt(args[5]) : 1;
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3];
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // A killed instance's member leaves the group after this, not Kafka's 45 s default.
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        // A transaction left open by a killed instance is aborted by the coordinator after this
        // (Streams' own EOS default, said here because the test's timing depends on it).
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word, Grouped.as("words"))
                .count(Materialized.as("counts"))
                .toStream()
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            print("STATE " + now);
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            print("ERROR " + e);
            e.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        stopped.await();
        System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
    }
}
