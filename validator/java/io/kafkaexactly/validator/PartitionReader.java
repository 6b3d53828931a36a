package io.kafkaexactly.validator;

import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The committed records of one partition in [start, end), in offset order, fetched as the
 * merge asks for them: the audit's range is read once and never held in memory whole.
 *
 * <p>read_committed, as every reader of staging, destination and changelog (invariant 6): an
 * aborted record is not data. A range end is a last stable offset taken before the read, so it
 * is always reachable. Where retention cuts the log while it is read, the reader goes on at the
 * new log start (as Spark's source with failOnDataLoss=false): the records cut are absent, and
 * the Python driver names the partition in the report (log_starts_moved).
 */
final class PartitionReader implements AutoCloseable {
  /** How long a reader may get neither a record nor a new position before the task fails. */
  static final Duration STALL = Duration.ofSeconds(120);

  private static final Duration POLL = Duration.ofMillis(200);

  private final KafkaConsumer<byte[], byte[]> consumer;
  private final TopicPartition partition;
  private final long end;
  private Iterator<ConsumerRecord<byte[], byte[]>> batch = Collections.emptyIterator();
  private ConsumerRecord<byte[], byte[]> next;
  private boolean done;

  PartitionReader(
      Map<String, String> cluster, String side, String topic, int partition, long start, long end) {
    this.partition = new TopicPartition(topic, partition);
    this.end = end;
    this.done = start >= end;
    Map<String, Object> config = new HashMap<>(cluster);
    config.put("key.deserializer", ByteArrayDeserializer.class.getName());
    config.put("value.deserializer", ByteArrayDeserializer.class.getName());
    config.put("isolation.level", "read_committed");
    config.put("enable.auto.commit", "false");
    config.put("auto.offset.reset", "earliest");
    // The Java client's defaults (500 records, 1 MiB a partition a fetch) cost a third of the
    // read at 100 B records; the same values as the join plan's Spark source (read.py).
    config.putIfAbsent("max.poll.records", "10000");
    config.putIfAbsent("max.partition.fetch.bytes", String.valueOf(8 * 1024 * 1024));
    config.putIfAbsent("fetch.max.bytes", String.valueOf(32 * 1024 * 1024));
    // A fetch at a range's end that holds only a transaction marker waits this long for data
    // that is not coming.
    config.putIfAbsent("fetch.max.wait.ms", "10");
    // One name per consumer: the client registers a JMX bean under it, and a name taken twice in
    // one executor makes it log a warning with a stack trace.
    String client = cluster.getOrDefault("client.id", "exactly-validate");
    config.put("client.id", client + "-merge-" + side + "-" + topic + "-" + partition);
    this.consumer = new KafkaConsumer<>(config);
    if (!done) {
      consumer.assign(List.of(this.partition));
      consumer.seek(this.partition, start);
    }
  }

  /** The next record without taking it; null after the range's last. */
  ConsumerRecord<byte[], byte[]> peek() {
    if (next == null && !done) {
      next = fetch();
    }
    return next;
  }

  /** The next record, taken; null after the range's last. */
  ConsumerRecord<byte[], byte[]> take() {
    ConsumerRecord<byte[], byte[]> record = peek();
    next = null;
    return record;
  }

  private ConsumerRecord<byte[], byte[]> fetch() {
    long waitingSince = System.nanoTime();
    long lastPosition = -1;
    while (true) {
      if (batch.hasNext()) {
        ConsumerRecord<byte[], byte[]> record = batch.next();
        if (record.offset() < end) {
          return record;
        }
        done = true;
        return null;
      }
      long position = consumer.position(partition);
      if (position >= end) {
        done = true;
        return null;
      }
      if (position != lastPosition) {
        lastPosition = position;
        waitingSince = System.nanoTime();
      } else if (System.nanoTime() - waitingSince > STALL.toNanos()) {
        throw new IllegalStateException(
            "no record of " + partition + " at offset " + position + " within " + STALL.toSeconds()
                + " s (its range ends at " + end + ")");
      }
      batch = consumer.poll(POLL).records(partition).iterator();
    }
  }

  @Override
  public void close() {
    consumer.close(Duration.ZERO);
  }
}
