"""The member process: a static Kafka consumer that processes its batches on Spark."""
