"""TLS settings of a producer: from ``ssl.*`` configuration to the selector's TlsContext.

The TLS itself (handshake, certificate and host name checks, record encryption) runs in
C inside the selector's poll loop (``csrc/kp_tls.c``, ``csrc/kp_selector.c``), as
librdkafka does it; this module only reads the configuration. It runs when a producer
starts (also after a fork), not when a :class:`~kproducer.config.ProducerConfig` is
built, so a configuration can be pickled to machines that hold the files at other times.

Every failure is a :class:`~kproducer.errors.ConfigError` naming the setting at fault:
a missing or unreadable file, a file that is not PEM, an encrypted key without (or with
the wrong) ``ssl.key.password``, a key that does not match its certificate. The
password never appears in messages.
"""

from __future__ import annotations

import os

from kproducer._net import TlsContext
from kproducer.errors import ConfigError, TlsConfigError

__all__ = ["TlsContext", "tls_context"]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def _path(cfg, *keys: str) -> tuple[str | None, str | None]:
    """(key, path) of the first of ``keys`` that is set, else (None, None); a file that is
    missing or unreadable is a ConfigError naming that key."""
    for key in keys:
        path = cfg[key]
        if path is None:
            continue
        if not os.path.isfile(path):
            what = "does not exist" if not os.path.exists(path) else "is not a file"
            raise ConfigError(f"{key}: {path!r} {what}", key=key)
        if not os.access(path, os.R_OK):
            raise ConfigError(f"{key}: {path!r} is not readable", key=key)
        return key, path
    return None, None


def tls_context(cfg) -> TlsContext | None:
    """The TlsContext for ``cfg`` (a ProducerConfig), or None when ``security.protocol``
    does not use TLS."""
    if cfg["security.protocol"] not in TLS_PROTOCOLS:
        return None
    ca_key, ca = _path(cfg, "ssl.truststore.location", "ssl.ca.location")
    cert_key, cert = _path(cfg, "ssl.keystore.location", "ssl.certificate.location")
    key_key, key = _path(cfg, "ssl.key.location")
    blame = {"cafile": ca_key or "ssl.truststore.location",
             "certfile": cert_key or "ssl.keystore.location",
             "keyfile": key_key or cert_key or "ssl.keystore.location"}
    password = cfg["ssl.key.password"]
    try:
        return TlsContext(ca, cert, key, password,
                          check_hostname=cfg["ssl.endpoint.identification.algorithm"] == "https")
    except TlsConfigError as exc:
        key_name = blame.get(exc.tls_input)
        # OpenSSL asked for the key's password and the key still did not load (kp_tls.c).
        decrypt = exc.key_password_failed
        if decrypt and password is not None:
            hint = " (is ssl.key.password right?)"
        elif decrypt:
            hint = " (an encrypted key needs ssl.key.password)"
        else:
            hint = ""
        raise ConfigError(f"{key_name or 'TLS'}: {exc}{hint}", key=key_name) from None
