"""Test helpers: a throwaway Tansu broker and a minimal blocking client.

Pure Python; nothing here imports the compiled codec.
"""

from .broker import BrokerStartError, TansuBroker, free_port
from .client import BlockingClient
from .proxy import FaultProxy
from .sasl_gateway import SaslGateway

__all__ = ["TansuBroker", "BrokerStartError", "BlockingClient", "free_port", "FaultProxy",
           "SaslGateway"]
