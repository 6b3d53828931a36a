// Writes one record per timestamp given, with Kafka's Java client: the one client of the two a
// test can make write a CreateTime of 0 (librdkafka takes 0 for "now").
// java -cp '<kafka libs>/*' StampedProducer.java <bootstrap> <topic> <timestamp ms>...
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class StampedProducer {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config)) {
            for (int i = 2; i < args.length; i++) {
                byte[] value = ("stamped " + args[i] + " #" + i).getBytes("UTF-8");
                producer.send(new ProducerRecord<>(args[1], 0, Long.parseLong(args[i]), null, value)).get();
            }
        }
    }
}
