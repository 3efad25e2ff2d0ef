"""The OAUTHBEARER tests' shared parts (tests/unit/test_oauth_tokens.py,
tests/broker/test_oauth.py): a polling wait, a token provider that fails on demand, the
tests' PKI and OIDC token endpoint, and a fake AWS MSK IAM signer."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest

from _wait import wait_until  # noqa: F401  (the OAuth tests import it from here)

from kproducer.testing.oidc import OidcServer, TokenIssuer
from kproducer.testing.tls import TestPki

OAUTH_BASE = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER")




# ---------------------------------------------------------------------------
# The login tests' token provider

class FlakyProvider:
    """Tokens of ``lifetime`` seconds; fails while ``failing`` is set; counts its calls."""

    def __init__(self, lifetime=60.0, issuer=None, subject="svc"):
        self.lifetime = lifetime
        self.issuer = issuer or TokenIssuer()
        self.subject = subject
        self.calls = 0
        self.failing = None              # an exception to raise, or None
        self.lock = threading.Lock()

    def __call__(self, config):
        with self.lock:
            self.calls += 1
            failing = self.failing
        if failing is not None:
            raise failing
        return self.issuer.mint(self.subject, lifetime=self.lifetime)


# ---------------------------------------------------------------------------
# The OIDC tests' PKI and token endpoint on loopback

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TestPki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def idp(pki):
    issuer = TokenIssuer(audience="kafka")
    with OidcServer(pki, issuer, clients={"kp-client": "kp-s3cret", "we+ird": "p@ss:w/rd"},
                    lifetime=30) as server:
        yield server


# ---------------------------------------------------------------------------
# A fake AWS MSK IAM signer module (the real one needs AWS credentials)

@pytest.fixture
def fake_msk_signer(monkeypatch):
    calls = []
    issuer = TokenIssuer(audience="kafka")

    def generate_auth_token(region):
        calls.append(("default", region))
        exp_s = time.time() + 900
        return issuer.mint(f"arn:aws:iam::123:role/{region}", lifetime=900), int(exp_s * 1000)

    def generate_auth_token_from_role_arn(region, role_arn, sts_session_name="MSKSASLDefaultSession"):
        calls.append(("role", region, role_arn, sts_session_name))
        return "b64urlsignedurl", int((time.time() + 900) * 1000)

    signer = types.SimpleNamespace(generate_auth_token=generate_auth_token,
                                   generate_auth_token_from_role_arn=generate_auth_token_from_role_arn)
    package = types.ModuleType("aws_msk_iam_sasl_signer")
    package.MSKAuthTokenProvider = signer
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", package)
    return types.SimpleNamespace(calls=calls, issuer=issuer)
