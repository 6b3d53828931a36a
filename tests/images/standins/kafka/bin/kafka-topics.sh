#!/bin/sh
# As the distribution's bin/kafka-topics.sh: its main class on the jars.
exec java -Xmx256m -Dlog4j2.configurationFile=/opt/kafka/log4j2.properties -cp "/opt/kafka/libs/*" org.apache.kafka.tools.TopicCommand "$@"
