"""kproducer: a Kafka producer for Python with a compiled C hot path."""

__version__ = "0.1.0"

import zipimport as _zipimport  # noqa: E402

if isinstance(__spec__.loader, _zipimport.zipimporter):
    # Imported from a zip or wheel on sys.path (Spark's --py-files, addPyFile,
    # kproducer.spark.ship): zipimport cannot load compiled modules, so the package
    # continues from a once-extracted copy of the archive (kproducer/_archive.py).
    from kproducer._archive import extract_package as _extract_package

    __path__[:] = [_extract_package(__spec__.loader.archive, __spec__.loader.prefix)]
    __file__ = __path__[0] + "/__init__.py"
    del _extract_package
del _zipimport

from kproducer._core import RecordFuture, RecordMetadata  # noqa: E402
from kproducer.errors import KafkaError, KafkaTimeoutError  # noqa: E402
from kproducer.producer import Producer  # noqa: E402
from kproducer.transactions import PreparedTransaction  # noqa: E402

__all__ = ["KafkaError", "KafkaTimeoutError", "PreparedTransaction", "Producer", "RecordFuture",
           "RecordMetadata", "__version__"]
