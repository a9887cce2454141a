"""SCRAM (RFC 7677's example exchange), PLAIN, credentials, and ACL matching with Kafka's rules."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from broker.security.acl import AclAuthorizer
from broker.security.config import parse_jaas
from broker.security.sasl_server import SaslServer
from broker.security.scram import ScramCredential, make_credential, parse_scram_config
from broker.server.config import BrokerConfig
from net.acl import AclBinding, AclBindingFilter, AclOperation, AclPermission, PatternType, ResourceType
from net.errors import InvalidConfigError, SaslAuthenticationError
from net.security import SaslClient

# RFC 7677 section 3: user "user", password "pencil".
C_NONCE = "rOprNGfwEbeRWgbNEkqO"
S_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def store(*creds: tuple[str, ScramCredential]):
    db = {(user, c.mechanism): c for user, c in creds}
    return lambda user, mech: db.get((user, mech))


def test_scram_sha_256_reproduces_rfc_7677_exchange():
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=SALT)
    client = SaslClient("SCRAM-SHA-256", "user", "pencil", c_nonce=C_NONCE)
    server = SaslServer("SCRAM-SHA-256", store(("user", cred)), s_nonce=S_NONCE)
    first = client.first()
    assert first.decode() == CLIENT_FIRST
    assert server.step(first).decode() == SERVER_FIRST
    final = client.step(SERVER_FIRST.encode())
    assert final is not None and final.decode() == CLIENT_FINAL
    assert server.step(final).decode() == SERVER_FINAL and server.complete and server.principal == "User:user"
    assert client.step(SERVER_FINAL.encode()) is None  # the client checked the server's signature


def _client_final(password: str, without_proof: str) -> str:
    """RFC 5802's client proof over `without_proof` as the client chose to write it (what librdkafka signs)."""
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), SALT, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    auth = f"{CLIENT_FIRST[3:]},{SERVER_FIRST},{without_proof}".encode()
    signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_scram_accepts_librdkafka_2_0s_nonce_as_kafka_does():
    """librdkafka up to 2.0 (Debian's kcat) puts its own nonce again in front of the server-first nonce; Kafka's
    ScramSaslServer accepts a nonce that ends with the server's, and so do we. A nonce that does not, a wrong
    channel binding or a wrong password are refused."""
    combined = SERVER_FIRST.split(",")[0][2:]
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=SALT)

    def server() -> SaslServer:
        s = SaslServer("SCRAM-SHA-256", store(("user", cred)), s_nonce=S_NONCE)
        assert s.step(CLIENT_FIRST.encode()).decode() == SERVER_FIRST
        return s

    ok = server()
    answer = ok.step(_client_final("pencil", f"c=biws,r={C_NONCE}{combined}").encode())
    assert ok.complete and ok.principal == "User:user" and answer.startswith(b"v=") and answer != SERVER_FINAL.encode()
    for final in (
        _client_final("pencil", f"c=biws,r={combined}x"),  # does not end with the server's nonce
        _client_final("pencil", f"c=biws,r={C_NONCE}"),  # the client's nonce alone
        _client_final("pencil", f"c=eSws,r={combined}"),  # channel binding other than the client-first's "n,,"
        _client_final("guess", f"c=biws,r={C_NONCE}{combined}"),
        f"c=biws,r={combined},p=bm90IGEgcHJvb2Y=",  # a proof of the wrong length
        f"c=biws,r={combined}",  # no proof at all
    ):
        refused = server()
        with pytest.raises(SaslAuthenticationError):
            refused.step(final.encode())
        assert not refused.complete


def test_scram_sha_512_round_trip_and_wrong_password_and_forged_server():
    cred = make_credential("SCRAM-SHA-512", "s3cret")
    lookup = store(("alice", cred))
    client, server = SaslClient("SCRAM-SHA-512", "alice", "s3cret"), SaslServer("SCRAM-SHA-512", lookup)
    assert client.step(server.step(client.step(server.step(client.first())))) is None
    assert server.principal == "User:alice"
    bad, server = SaslClient("SCRAM-SHA-512", "alice", "guess"), SaslServer("SCRAM-SHA-512", lookup)
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.step(bad.step(server.step(bad.first())))
    assert not server.complete
    # a server that does not know the password cannot fake the final message
    client = SaslClient("SCRAM-SHA-512", "alice", "s3cret")
    server = SaslServer("SCRAM-SHA-512", lookup)
    client.step(server.step(client.first()))
    with pytest.raises(SaslAuthenticationError):
        client.step(b"v=" + base64.b64encode(b"\0" * 64))


def test_unknown_user_fails_like_a_wrong_password():
    server = SaslServer("SCRAM-SHA-256", store())
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.step(SaslClient("SCRAM-SHA-256", "nobody", "x").first())


def test_plain_is_checked_against_the_scram_credential():
    lookup = store(("bob", make_credential("SCRAM-SHA-256", "pw")))
    ok = SaslServer("PLAIN", lookup)
    assert ok.step(SaslClient("PLAIN", "bob", "pw").first()) == b"" and ok.principal == "User:bob"
    for token in (SaslClient("PLAIN", "bob", "no").first(), b"\0bob", b"eve\0bob\0pw"):
        with pytest.raises(SaslAuthenticationError):
            SaslServer("PLAIN", lookup).step(token)


def test_credentials_round_trip_records_and_keep_no_password():
    cred = make_credential("SCRAM-SHA-256", "pencil", 8192)
    record = cred.to_record("user")
    assert "pencil" not in repr(record) and record["iterations"] == 8192
    assert ScramCredential.from_record(record) == cred and cred.check_password("pencil")
    assert not cred.check_password("pencil!")
    with pytest.raises(Exception, match="iterations"):
        make_credential("SCRAM-SHA-256", "x", 100)


def test_scram_config_and_jaas_parsing():
    assert parse_scram_config("SCRAM-SHA-256=[name=admin,password=admin-secret]", True) == (
        "SCRAM-SHA-256",
        "admin",
        "admin-secret",
        4096,
    )
    assert parse_scram_config("SCRAM-SHA-512=[password=p,iterations=8192]", False)[3] == 8192
    for bad in ("SCRAM-SHA-1=[name=a,password=b]", "SCRAM-SHA-256=[name=a]", "SCRAM-SHA-256=name=a", "X"):
        with pytest.raises(ValueError):
            parse_scram_config(bad, True)
    line = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="p w";'
    assert parse_jaas(line) == ("broker", "p w")
    with pytest.raises(InvalidConfigError):
        parse_jaas("ScramLoginModule required;")


def test_listener_protocol_map_and_short_form():
    cfg = BrokerConfig.from_props({"security.protocol": "SASL_PLAINTEXT"})
    assert cfg.listener_protocols() == {
        "NATIVE": "SASL_PLAINTEXT",
        "KAFKA": "SASL_PLAINTEXT",
        "BROKER": "SASL_PLAINTEXT",
    }
    cfg = BrokerConfig.from_props({"listener.security.protocol.map": "KAFKA:SASL_PLAINTEXT"})
    assert cfg.listener_protocols() == {"NATIVE": "PLAINTEXT", "KAFKA": "SASL_PLAINTEXT", "BROKER": "PLAINTEXT"}
    # The inter-broker listener follows NATIVE unless the map names it.
    cfg = BrokerConfig.from_props({"listener.security.protocol.map": "NATIVE:SASL_PLAINTEXT,KAFKA:SASL_PLAINTEXT"})
    assert cfg.listener_protocol("BROKER") == "SASL_PLAINTEXT"
    with pytest.raises(InvalidConfigError, match="keystore"):
        BrokerConfig.from_props({"security.protocol": "SSL"})
    with pytest.raises(InvalidConfigError, match="sasl.jaas.config"):
        BrokerConfig.from_props({"security.protocol": "SASL_PLAINTEXT", "peers": "1@h:1,2@h:2"})
    with pytest.raises(InvalidConfigError, match="listener.security.protocol.map"):
        BrokerConfig.from_props({"listener.security.protocol.map": "OTHER:SSL"})


def acl(rt, name, pt, principal, op, perm, host="*") -> AclBinding:
    return AclBinding(rt, name, pt, principal, host, op, perm)


T, G, LIT, PRE = ResourceType.TOPIC, ResourceType.GROUP, PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermission.ALLOW, AclPermission.DENY
Op = AclOperation


def test_acl_matching_follows_kafkas_rules():
    auth = AclAuthorizer(super_users={"User:admin"})
    acls = [
        acl(T, "orders", LIT, "User:alice", Op.WRITE, ALLOW),
        acl(T, "logs-", PRE, "User:bob", Op.READ, ALLOW),
        acl(T, "logs-secret", LIT, "User:bob", Op.READ, DENY),
        acl(T, "*", LIT, "User:carol", Op.ALL, ALLOW),
        acl(G, "g", LIT, "User:*", Op.READ, ALLOW),
        acl(T, "orders", LIT, "User:mallory", Op.ALL, DENY),
        acl(T, "orders", LIT, "User:mallory", Op.WRITE, ALLOW),
        acl(T, "hosts", LIT, "User:dave", Op.READ, ALLOW, host="10.0.0.1"),
    ]

    def ok(principal, op, rt, name, host="127.0.0.1") -> bool:
        return auth.authorize(acls, principal, host, op, rt, name)

    assert ok("User:alice", Op.WRITE, T, "orders") and not ok("User:alice", Op.READ, T, "orders")
    assert ok("User:alice", Op.DESCRIBE, T, "orders")  # WRITE implies DESCRIBE
    assert ok("User:bob", Op.READ, T, "logs-app") and not ok("User:bob", Op.READ, T, "logs-secret")  # deny wins
    assert not ok("User:bob", Op.READ, T, "log")  # a prefix covers names that start with it only
    assert ok("User:carol", Op.DELETE, T, "anything") and ok("User:anyone", Op.READ, G, "g")
    assert not ok("User:mallory", Op.WRITE, T, "orders")  # DENY ALL beats ALLOW WRITE
    assert ok("User:admin", Op.DELETE, T, "orders")  # super user
    assert ok("User:dave", Op.READ, T, "hosts", "10.0.0.1") and not ok("User:dave", Op.READ, T, "hosts")
    # no binding names group "fresh" (the "*" one is for topics): allow.everyone.if.no.acl.found decides
    assert not ok("User:alice", Op.READ, G, "fresh")
    assert AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize(acls, "User:x", "h", Op.READ, G, "fresh")
    assert not AclAuthorizer(allow_everyone_if_no_acl_found=True).authorize(acls, "User:x", "h", Op.READ, T, "new")
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS, not the other way round
    cfg = [acl(T, "t", LIT, "User:e", Op.ALTER_CONFIGS, ALLOW)]
    assert auth.authorize(cfg, "User:e", "h", Op.DESCRIBE_CONFIGS, T, "t")
    assert not auth.authorize(cfg, "User:e", "h", Op.DELETE, T, "t")


def test_acl_filters_and_validation():
    a = acl(T, "orders", LIT, "User:alice", Op.WRITE, ALLOW)
    b = acl(T, "ord", PRE, "User:bob", Op.READ, ALLOW)
    assert AclBindingFilter().matches(a) and AclBindingFilter(principal="User:bob").matches(b)
    assert not AclBindingFilter(principal="User:bob").matches(a)
    match = AclBindingFilter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH)
    assert match.matches(a) and match.matches(b)  # MATCH: what applies to "orders"
    assert not AclBindingFilter(pattern_type=PatternType.PREFIXED, resource_name="orders").matches(a)
    assert AclBinding.from_wire(a.to_wire()) == a
    for bad in (
        acl(ResourceType.ANY, "x", LIT, "User:a", Op.READ, ALLOW),
        acl(T, "x", PatternType.MATCH, "User:a", Op.READ, ALLOW),
        acl(T, "x", LIT, "alice", Op.READ, ALLOW),
        acl(T, "*", PRE, "User:a", Op.READ, ALLOW),
        acl(ResourceType.CLUSTER, "c", LIT, "User:a", Op.ALTER, ALLOW),
    ):
        with pytest.raises(ValueError):
            bad.validate()


def test_quota_precedence_and_throttle_time():
    from broker.quota.client_quota import PRODUCER_BYTE_RATE, ClientQuotaManager

    quotas = {
        (("user", "alice"), ("client-id", "etl")): {PRODUCER_BYTE_RATE: 100.0},
        (("user", "alice"),): {PRODUCER_BYTE_RATE: 1000.0},
        (("client-id", None),): {PRODUCER_BYTE_RATE: 50.0},
    }
    m = ClientQuotaManager(lambda: quotas, window_num=2, window_size_s=1.0)
    assert m.quota_for("alice", "etl", PRODUCER_BYTE_RATE)[1] == 100.0  # user + client id wins
    assert m.quota_for("alice", "other", PRODUCER_BYTE_RATE)[1] == 1000.0  # then the user
    assert m.quota_for("bob", "x", PRODUCER_BYTE_RATE) == ((("client-id", "x"),), 50.0)  # default client, per id
    assert m.quota_for("bob", "x", "consumer_byte_rate") is None
    # 100 B/s measured over (at least) one sample: 100 bytes pass, 300 more are 3x over -> (400-100)/100 x 2 s
    assert m.record("alice", "etl", PRODUCER_BYTE_RATE, 100, now=0.0) == 0
    assert m.record("alice", "etl", PRODUCER_BYTE_RATE, 300, now=0.5) == 6000
    # other entities are metered apart; no quota, no throttle
    assert m.record("alice", "other", PRODUCER_BYTE_RATE, 900, now=0.5) == 0
    assert m.record("carol", "c", "request_percentage", 1e9, now=0.5) == 0
    assert not ClientQuotaManager(lambda: {}).active and m.active
