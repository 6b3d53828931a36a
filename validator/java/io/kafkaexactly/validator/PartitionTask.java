package io.kafkaexactly.validator;

/**
 * One partition pair to merge, as the Python driver describes it (validator/merge.py): public
 * fields, read by Jackson. A side's range is null when its topic has no such partition.
 */
public final class PartitionTask {
  /** Offsets [start, end) and where retention has cut the log (validator/snapshot.py). */
  public static final class Range {
    public long start;
    public long end;
    public long logStart;
  }

  /** The source topic's name: the report's name of the pair. */
  public String topic;

  public String destinationTopic;
  public int partition;
  /** "provenance" or "content" (validator/kinds.py). */
  public String mode;
  /** The source cluster's id: a copy of this flow names it in its exactly.origin header. */
  public String clusterId;
  /** Active-active: a destination record without the header is the destination's own. */
  public boolean twoWay;
  /** A compacted source has offsets without records (a copy may name one). */
  public boolean sourceCompacted;

  public Range source;
  public Range destination;
}
