package io.kafkaexactly.validator;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What the merge found in one partition pair: the count of each kind of finding (validator/kinds.py),
 * the first finding of each kind (the example the join plan would pick: the smallest source
 * offset, then destination offset), or, when it met anything but a clean copy, only that it did
 * not prove the pair, and why. Public fields, written by Jackson.
 */
public final class PartitionResult {
  public String topic;
  public int partition;
  public boolean proven = true;
  /** Why the pair is not proven: the first thing that was not a clean copy. */
  public String reason;

  public Map<String, Long> counts = new LinkedHashMap<>();
  /** By kind: source offset, destination partition, destination offset, detail (nulls allowed). */
  public Map<String, List<Object>> firsts = new LinkedHashMap<>();

  PartitionResult(PartitionTask task) {
    topic = task.topic;
    partition = task.partition;
  }

  void count(String kind) {
    counts.merge(kind, 1L, Long::sum);
  }

  /** A finding that carries an example; records arrive in offset order, so the first kept is
   * the smallest. */
  void found(String kind, Long sourceOffset, Integer destinationPartition, Long destinationOffset,
      String detail) {
    count(kind);
    if (!firsts.containsKey(kind)) {
      List<Object> example = new ArrayList<>(4);
      example.add(sourceOffset);
      example.add(destinationPartition);
      example.add(destinationOffset);
      example.add(detail);
      firsts.put(kind, example);
    }
  }

  /** Not proven: the driver checks the pair's topic with the join plan, which names every
   * finding. Counted so far is dropped: the join plan counts again from the start. */
  PartitionResult unproven(String why) {
    proven = false;
    reason = why;
    counts.clear();
    firsts.clear();
    return this;
  }
}
