package io.kafkaexactly.validator;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;

/**
 * The merge plan's Spark job, called by the Python driver (validator/merge.py) through py4j:
 * one Spark task for each partition pair, which reads both sides' ranges and merges them
 * (PartitionMerge). No shuffle, no Python on the executors: only this jar, the Kafka client
 * Spark's Kafka connector brings, and Jackson, which Spark has.
 */
public final class MergeJob {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String DIGEST_RESOURCE = "sources.digest";

  private MergeJob() {}

  /**
   * The digest of the sources this jar was compiled from (validator/merge_jar.py writes it
   * beside the classes): the driver uses the jar only when it is its own sources' build, as the
   * JSON the two exchange is theirs.
   */
  public static String sourcesDigest() throws IOException {
    try (InputStream in = MergeJob.class.getResourceAsStream(DIGEST_RESOURCE)) {
      return in == null ? "" : new String(in.readAllBytes(), StandardCharsets.UTF_8).trim();
    }
  }

  /**
   * Merges every task and returns the results as one JSON array, in the tasks' order.
   *
   * @param tasks a JSON array of PartitionTask, largest first (a task each, in that order)
   * @param source the source cluster's Kafka client properties, a JSON object
   * @param destination the destination cluster's, likewise
   */
  public static String run(SparkSession spark, String tasks, String source, String destination)
      throws IOException {
    TypeReference<HashMap<String, String>> properties = new TypeReference<>() {};
    HashMap<String, String> sourceConfig = JSON.readValue(source, properties);
    HashMap<String, String> destinationConfig = JSON.readValue(destination, properties);
    List<String> each = new ArrayList<>();
    for (Object task : JSON.readValue(tasks, List.class)) {
      each.add(JSON.writeValueAsString(task));
    }
    JavaSparkContext context = JavaSparkContext.fromSparkContext(spark.sparkContext());
    List<String> results =
        context
            .parallelize(each, Math.max(1, each.size()))
            .map(task -> merge(task, sourceConfig, destinationConfig))
            .collect();
    return "[" + String.join(",", results) + "]";
  }

  private static String merge(
      String task, HashMap<String, String> source, HashMap<String, String> destination) {
    try {
      PartitionTask parsed = JSON.readValue(task, PartitionTask.class);
      return JSON.writeValueAsString(PartitionMerge.merge(parsed, source, destination));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
