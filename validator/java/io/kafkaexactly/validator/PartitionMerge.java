package io.kafkaexactly.validator;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * One partition pair, merged: the destination partition read in order beside the source
 * partition of the same number, each record compared with the one it must be a copy of.
 *
 * <p>The merge only proves. A pair where every record is a clean copy, in order, in its own
 * partition, is counted here exactly as the join plan (validator/by_provenance.py,
 * validator/by_content.py) would count it: matched, the record counts, and what lies outside
 * the copy by design (in flight, looped, local, another cluster's copy, outside the range,
 * retention). At anything else (a record missing, duplicated, out of order, changed, in another
 * partition, invented, a malformed header) it stops and says why, and the driver checks that
 * topic again with the join plan, which names every finding: the report is the same either way,
 * only cheaper when the copy is clean.
 */
final class PartitionMerge {
  // validator/kinds.py
  static final String MATCHED = "matched";
  static final String SOURCE_RECORD = "_source_record";
  static final String DESTINATION_RECORD = "_destination_record";
  static final String IN_FLIGHT = "in_flight";
  static final String LOOPED = "looped";
  static final String LOCAL = "local";
  static final String OTHER_ORIGIN = "other_origin";
  static final String SOURCE_RETENTION = "source_retention";
  static final String DESTINATION_RETENTION = "destination_retention";
  static final String BEFORE_RANGE = "before_range";
  static final String AFTER_RANGE = "after_range";
  static final String COMPACTED = "compacted";

  static final String HEADER_PROVENANCE = "exactly.origin";
  // envelope/provenance.py's `<cluster id>/<partition>/<offset>`, as validator/read.py reads it.
  private static final Pattern PROVENANCE = Pattern.compile("^(.+)/(\\d+)/(\\d+)$");

  private PartitionMerge() {}

  static PartitionResult merge(
      PartitionTask task, Map<String, String> source, Map<String, String> destination) {
    PartitionResult result = new PartitionResult(task);
    if (task.source == null || task.destination == null) {
      return result.unproven("the partition exists on one side only");
    }
    try (PartitionReader sources =
            reader(source, "source", task.topic, task.partition, task.source);
        PartitionReader copies =
            reader(destination, "destination", task.destinationTopic, task.partition,
                task.destination)) {
      return "content".equals(task.mode)
          ? byContent(task, sources, copies, result)
          : byProvenance(task, sources, copies, result);
    }
  }

  private static PartitionReader reader(
      Map<String, String> cluster, String side, String topic, int partition,
      PartitionTask.Range range) {
    return new PartitionReader(cluster, side, topic, partition, range.start, range.end);
  }

  /** Each copy names its source offset: the copies of this partition, in destination order,
   * must name the source's records one after the other. */
  private static PartitionResult byProvenance(
      PartitionTask task, PartitionReader sources, PartitionReader copies, PartitionResult result) {
    int p = task.partition;
    PartitionTask.Range range = task.source;
    long lastOrigin = -1; // of this flow's copies in this partition, in destination order
    boolean copiedInRange = false;
    // The keys of copies whose source record is gone from a compacted source, until a later
    // record of the same key (a copy, or a source record) shows that a cleaner could have
    // removed it; one left at the end is not proven compacted (the join plan says what it is,
    // knowing whether --until left the later records unread).
    Set<ByteBuffer> unreplaced = new HashSet<>();
    for (ConsumerRecord<byte[], byte[]> copy; (copy = copies.take()) != null; ) {
      result.count(DESTINATION_RECORD);
      long at = copy.offset();
      byte[] header = lastOrigin(copy.headers().toArray());
      if (header == null) {
        if (!task.twoWay) {
          return result.unproven("destination offset " + at + " has no exactly.origin header");
        }
        result.found(LOCAL, null, p, at, null); // produced on the destination (active-active)
        continue;
      }
      Matcher origin = ascii(header) ? PROVENANCE.matcher(new String(header, US_ASCII)) : null;
      if (origin == null || !origin.find()) {
        return result.unproven("destination offset " + at + " has a malformed exactly.origin");
      }
      if (!origin.group(1).equals(task.clusterId)) {
        result.found(OTHER_ORIGIN, null, p, at, "from cluster " + origin.group(1));
        continue;
      }
      long originPartition, originOffset;
      try {
        originPartition = Integer.parseInt(origin.group(2));
        originOffset = Long.parseLong(origin.group(3));
      } catch (NumberFormatException e) {
        return result.unproven("destination offset " + at + " has a malformed exactly.origin");
      }
      if (originPartition != p) {
        return result.unproven(
            "destination offset " + at + " is a copy from source partition " + originPartition);
      }
      if (originOffset <= lastOrigin) {
        return result.unproven(
            "destination offset " + at + " copies source offset " + originOffset + " after "
                + lastOrigin);
      }
      lastOrigin = originOffset;
      replaced(unreplaced, copy);
      if (originOffset < range.logStart) {
        result.found(SOURCE_RETENTION, null, p, at, null);
        continue;
      }
      if (originOffset < range.start) {
        result.found(BEFORE_RANGE, null, p, at, null);
        continue;
      }
      if (originOffset >= range.end) {
        result.found(AFTER_RANGE, null, p, at, null);
        continue;
      }
      // Every source record before the one this copies has no copy (the copies are in order).
      for (ConsumerRecord<byte[], byte[]> record;
          (record = sources.peek()) != null && record.offset() < originOffset; ) {
        sources.take();
        replaced(unreplaced, record);
        result.count(SOURCE_RECORD);
        if (carriesOrigin(record)) {
          result.found(LOOPED, record.offset(), null, null, null);
        } else if (!copiedInRange && task.destination.logStart > 0) {
          // Before the first copy, on a destination whose retention has cut its log.
          result.found(DESTINATION_RETENTION, record.offset(), null, null, null);
        } else {
          return result.unproven("source offset " + record.offset() + " has no copy");
        }
      }
      copiedInRange = true;
      ConsumerRecord<byte[], byte[]> original = sources.peek();
      if (original == null || original.offset() != originOffset) {
        if (task.sourceCompacted && copy.key() != null) { // the source's cleaner removed it
          if (copy.value() != null) { // a tombstone goes after delete.retention.ms, unreplaced
            unreplaced.add(ByteBuffer.wrap(copy.key()));
          }
          result.found(COMPACTED, null, p, at, null);
          continue;
        }
        return result.unproven(
            "destination offset " + at + " names source offset " + originOffset
                + ", not a committed record there");
      }
      sources.take();
      replaced(unreplaced, original);
      result.count(SOURCE_RECORD);
      if (carriesOrigin(original)) {
        return result.unproven("source offset " + originOffset + " is a copy, copied again");
      }
      String changed = changed(original, copy);
      if (changed != null) {
        return result.unproven(changed + " of source offset " + originOffset + " changed");
      }
      result.count(MATCHED);
    }
    // Past the furthest copy: on its way (in flight), or a copy that is not copied (looped).
    tail(sources, result, unreplaced);
    if (!unreplaced.isEmpty()) {
      return result.unproven(
          unreplaced.size() + " key(s) copied from offsets the compacted source no longer holds"
              + " have no later record on either side");
    }
    return result;
  }

  /** A record later than every claim in {@code unreplaced} replaces its key's claim. */
  private static void replaced(Set<ByteBuffer> unreplaced, ConsumerRecord<byte[], byte[]> record) {
    if (!unreplaced.isEmpty() && record.key() != null) {
      unreplaced.remove(ByteBuffer.wrap(record.key()));
    }
  }

  /** Without the header: the destination partition must be the source partition's records,
   * those that are copies left out, in the same order (a prefix while some are in flight).
   * There the join plan's pairing (the n-th record of a content with the n-th) is this one. */
  private static PartitionResult byContent(
      PartitionTask task, PartitionReader sources, PartitionReader copies, PartitionResult result) {
    for (ConsumerRecord<byte[], byte[]> copy; (copy = copies.take()) != null; ) {
      result.count(DESTINATION_RECORD);
      ConsumerRecord<byte[], byte[]> original;
      while ((original = sources.take()) != null && carriesOrigin(original)) {
        result.count(SOURCE_RECORD);
        result.found(LOOPED, original.offset(), null, null, null);
      }
      if (original == null) {
        return result.unproven(
            "destination offset " + copy.offset() + " is past the source's last record");
      }
      result.count(SOURCE_RECORD);
      String changed = changed(original, copy);
      if (changed != null) {
        return result.unproven(
            "destination offset " + copy.offset() + " is not source offset " + original.offset()
                + " (" + changed + ")");
      }
      result.count(MATCHED);
    }
    tail(sources, result, Set.of());
    return result;
  }

  private static void tail(
      PartitionReader sources, PartitionResult result, Set<ByteBuffer> unreplaced) {
    for (ConsumerRecord<byte[], byte[]> record; (record = sources.take()) != null; ) {
      replaced(unreplaced, record);
      result.count(SOURCE_RECORD);
      result.found(carriesOrigin(record) ? LOOPED : IN_FLIGHT, record.offset(), null, null, null);
    }
  }

  /** The field that differs ("key", "value", "headers", "timestamp"), or null. The header list
   * is compared without exactly.origin: the pipeline's addition, not part of the record. */
  static String changed(ConsumerRecord<byte[], byte[]> original, ConsumerRecord<byte[], byte[]> copy) {
    if (!Arrays.equals(original.key(), copy.key())) {
      return "key";
    }
    if (!Arrays.equals(original.value(), copy.value())) {
      return "value";
    }
    if (!sameHeaders(original.headers().toArray(), copy.headers().toArray())) {
      return "headers";
    }
    if (original.timestamp() != copy.timestamp()) {
      return "timestamp";
    }
    return null;
  }

  private static boolean sameHeaders(Header[] left, Header[] right) {
    int i = 0, j = 0;
    while (true) {
      while (i < left.length && HEADER_PROVENANCE.equals(left[i].key())) {
        i++;
      }
      while (j < right.length && HEADER_PROVENANCE.equals(right[j].key())) {
        j++;
      }
      if (i == left.length || j == right.length) {
        return i == left.length && j == right.length;
      }
      if (!left[i].key().equals(right[j].key()) || !Arrays.equals(left[i].value(), right[j].value())) {
        return false;
      }
      i++;
      j++;
    }
  }

  /** Whether a record is a copy a stage 2 wrote: an exactly.origin header with a value
   * (envelope.carries_provenance). */
  static boolean carriesOrigin(ConsumerRecord<byte[], byte[]> record) {
    return lastOrigin(record.headers().toArray()) != null;
  }

  /** The value of the last exactly.origin header with one: stage 2 appends its own after the
   * record's headers, so on a copy of a copy the last names this hop. */
  private static byte[] lastOrigin(Header[] headers) {
    for (int i = headers.length - 1; i >= 0; i--) {
      if (HEADER_PROVENANCE.equals(headers[i].key()) && headers[i].value() != null) {
        return headers[i].value();
      }
    }
    return null;
  }

  // A header that is not ASCII is not one stage 2 wrote; the join plan names what it is.
  private static boolean ascii(byte[] bytes) {
    for (byte b : bytes) {
      if (b < 0) {
        return false;
      }
    }
    return true;
  }

  private static final java.nio.charset.Charset US_ASCII = java.nio.charset.StandardCharsets.US_ASCII;
}
