"""kproducer: a Kafka producer for Python with a compiled C hot path."""

__version__ = "0.1.0"

from kproducer._accumulator import RecordFuture, RecordMetadata  # noqa: E402
from kproducer.errors import KafkaError, KafkaTimeoutError  # noqa: E402
from kproducer.producer import Producer  # noqa: E402

__all__ = ["KafkaError", "KafkaTimeoutError", "Producer", "RecordFuture", "RecordMetadata", "__version__"]
