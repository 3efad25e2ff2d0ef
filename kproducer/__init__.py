"""kproducer: a Kafka producer for Python with a compiled C hot path."""

__version__ = "0.1.0"
