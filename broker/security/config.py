"""The broker's security keys, with Kafka's names (docs/SECURITY.md, docs/CONFIGURATION.md).

A broker has the listeners NATIVE (`port`, msgpack), KAFKA (`kafka.port`, Kafka's protocol), BROKER
(inter-broker) and any others named in `listeners` (broker/security/listeners.py). Each has a security
protocol: `security.protocol` sets the built-in ones (the short form), `listener.security.protocol.map`
(`NATIVE:SASL_SSL,KAFKA:SASL_SSL`) sets them one by one as Kafka's map does. Brokers talk to each other
on BROKER (`inter.broker.listener.name`), logging in with `sasl.jaas.config` (Kafka's JAAS line) and/or
their TLS certificate (mutual TLS). TLS material is PEM (Kafka's `ssl.keystore.type=PEM`, KIP-651).
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator

from broker.security.acl import parse_super_users
from broker.security.listeners import BROKER, NATIVE, ListenerKeys, default_protocol, parse_endpoints, parse_map
from net.config_def import Bool, Int, Str, choice, key
from net.errors import InvalidConfigError
from net.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, ClientSecurity, uses_sasl, uses_ssl

LISTENERS = ("NATIVE", "KAFKA", "BROKER")
# The login a broker proves the cluster secret with on an inter-broker listener without SASL of its own
# (SCRAM over the secret: a challenge-response, the secret never crosses the wire).
SECRET_USER = "__kafkalite_broker"
SECRET_MECHANISM = "SCRAM-SHA-256"
OptStr = Annotated[str | None, BeforeValidator(lambda v: v.strip() or None if isinstance(v, str) else v)]
# Kafka's authorizer class names, for server.properties written for Kafka.
KAFKA_AUTHORIZERS = {
    "kafka.security.authorizer.AclAuthorizer": "acl",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer": "acl",
}
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas(line: str) -> tuple[str, str]:
    """(username, password) of a Kafka JAAS line: `org.apache.kafka.common.security.scram.ScramLoginModule
    required username="broker" password="secret";` (PlainLoginModule alike)."""
    fields = dict(_JAAS.findall(line))
    if "username" not in fields or "password" not in fields:
        raise InvalidConfigError('sasl.jaas.config needs username="..." and password="..."')
    return fields["username"], fields["password"]


class SecurityKeys(ListenerKeys):
    """Mixed into BrokerConfig (with the listener keys of broker/security/listeners.py)."""

    security_protocol: choice(*SECURITY_PROTOCOLS, normalize=str.upper) = key(  # type: ignore[valid-type]
        "security.protocol",
        "PLAINTEXT",
        "Security protocol of the built-in listeners (NATIVE, KAFKA, BROKER) unless listener.security.protocol.map "
        "names one.",
    )
    listener_security_protocol_map: Str = key(
        "listener.security.protocol.map",
        "",
        "LISTENER:PROTOCOL,... for the listeners NATIVE (port), KAFKA (kafka.port), BROKER (default: NATIVE's) and "
        "those of listeners, e.g. NATIVE:SSL,KAFKA:SASL_SSL,EXTERNAL:SASL_SSL. Unnamed: security.protocol for the "
        "built-in ones; Kafka's defaults for listeners named PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.",
    )
    # --- the inter-broker listener (issue 25 §3): what brokers send each other, never on a client listener ---
    inter_broker_listener_name: choice("BROKER", "NATIVE", normalize=str.upper) = key(  # type: ignore[valid-type]
        "inter.broker.listener.name",
        "BROKER",
        "The listener brokers use with each other: BROKER, a listener of its own (inter.broker.port); the "
        "client listeners refuse broker-only requests. NATIVE is read as BROKER (older configs).",
    )
    controller_listener_names: choice("BROKER", normalize=str.upper) = key(  # type: ignore[valid-type]
        "controller.listener.names",
        "BROKER",
        "The listener of the controller quorum (election, metadata log): the inter-broker listener.",
    )
    inter_broker_port: Int = key(
        "inter.broker.port",
        0,
        "Port of the inter-broker listener (BROKER, on host); 0 (default): any free port, which peers learn "
        "from the native listener.",
        ge=0,
        le=65535,
    )
    inter_broker_secret: OptStr = key(
        "inter.broker.secret",
        None,
        "The cluster's secret: brokers prove it to each other (SCRAM-SHA-256, never sent) on an inter-broker "
        "listener without SASL of its own. Prefer inter.broker.secret.file.",
        sensitive=True,
    )
    inter_broker_secret_file: OptStr = key(
        "inter.broker.secret.file",
        None,
        "File holding inter.broker.secret (one line; refused unless only its owner may read it, mode 0600). "
        "kl-cluster up and deploy/node/install.sh make one per cluster.",
    )
    sasl_enabled_mechanisms: Str = key(
        "sasl.enabled.mechanisms",
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms the SASL listeners accept: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (PLAIN only over TLS!).",
    )
    sasl_mechanism_inter_broker_protocol: choice(*SASL_MECHANISMS, normalize=str.upper) = key(  # type: ignore[valid-type]
        "sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256", "Mechanism brokers log in to each other with."
    )
    sasl_jaas_config: OptStr = key(
        "sasl.jaas.config",
        None,
        'This broker\'s login to other brokers on a SASL listener: ... required username="broker" password="...";',
        sensitive=True,
    )
    sasl_server_max_receive_size: Int = key(
        "sasl.server.max.receive.size",
        524288,
        "Largest frame (a SASL token included) accepted before authentication.",
        ge=1,
    )
    connection_failed_authentication_delay_ms: Int = key(
        "connection.failed.authentication.delay.ms",
        100,
        "A failed login's answer is delayed this long before the connection closes (slows password guessing).",
        ge=0,
    )
    connections_max_unauthenticated_ms: Int = key(
        "connections.max.unauthenticated.ms",
        10000,
        "A connection to a SASL listener that has not logged in within this long is closed.",
        ge=1,
    )
    ssl_keystore_type: choice("PEM", normalize=str.upper) = key(  # type: ignore[valid-type]
        "ssl.keystore.type", "PEM", "Format of ssl.keystore.location (PEM: private key and certificate chain)."
    )
    ssl_keystore_location: OptStr = key(
        "ssl.keystore.location", None, "PEM file with this broker's private key and certificate chain."
    )
    ssl_key_password: OptStr = key(
        "ssl.key.password", None, "Password of the private key, if encrypted.", sensitive=True
    )
    ssl_truststore_type: choice("PEM", normalize=str.upper) = key(  # type: ignore[valid-type]
        "ssl.truststore.type", "PEM", "Format of ssl.truststore.location."
    )
    ssl_truststore_location: OptStr = key(
        "ssl.truststore.location", None, "PEM file of the CA certificates this broker trusts (clients, other brokers)."
    )
    ssl_client_auth: choice("none", "requested", "required", normalize=str.lower) = key(  # type: ignore[valid-type]
        "ssl.client.auth",
        "none",
        "Mutual TLS: required (clients must present a certificate the truststore verifies), requested, or none.",
    )
    ssl_endpoint_identification_algorithm: Str = key(
        "ssl.endpoint.identification.algorithm",
        "https",
        "As a client of other brokers: https checks their host name against their certificate; empty: no check.",
    )
    authorizer: choice("", "acl") = key(  # type: ignore[valid-type]
        "authorizer",
        "",
        "acl: enforce ACLs (Kafka's authorizer.class.name=...AclAuthorizer/StandardAuthorizer); empty: off.",
    )
    super_users: Str = key("super.users", "", "Principals allowed everything: User:admin;User:broker")
    allow_everyone_if_no_acl_found: Bool = key(
        "allow.everyone.if.no.acl.found",
        False,
        "With the authorizer on: allow everyone on a resource no ACL names (Kafka's default false).",
    )

    # --- limits and quotas (Kafka's names and defaults) --------------------------------------------
    max_connections: Int = key(
        "max.connections", 2147483647, "Connections the broker accepts on all listeners together.", ge=1
    )
    max_connections_per_ip: Int = key(
        "max.connections.per.ip", 2147483647, "Connections accepted from one IP address.", ge=1
    )
    connections_max_idle_ms: Int = key(
        "connections.max.idle.ms", 600000, "A connection with no request for this long is closed.", ge=1
    )
    queued_max_requests: Int = key(
        "queued.max.requests",
        500,
        "Requests of one connection being handled at once; reading it pauses beyond (bounds memory per client).",
        ge=1,
    )
    socket_partial_request_timeout_ms: Int = key(
        "socket.partial.request.timeout.ms",
        30000,
        "A started request must arrive whole within this long, else the connection is closed (slow senders).",
        ge=1,
    )
    quota_window_num: Int = key("quota.window.num", 11, "Samples a client quota's rate is measured over.", ge=1)
    quota_window_size_seconds: Int = key("quota.window.size.seconds", 1, "Length of one client-quota sample.", ge=1)

    @classmethod
    def security_aliases(cls, props: dict[str, Any]) -> dict[str, Any]:
        """Kafka's authorizer.class.name in place of authorizer."""
        props = dict(props)
        if "authorizer.class.name" in props:
            name = str(props.pop("authorizer.class.name")).strip()
            if name and name not in KAFKA_AUTHORIZERS:
                raise InvalidConfigError(f"authorizer.class.name {name!r}: only {', '.join(KAFKA_AUTHORIZERS)}")
            props.setdefault("authorizer", KAFKA_AUTHORIZERS.get(name, ""))
        return props

    def listener_protocol(self, listener: str) -> str:
        """NATIVE's or KAFKA's security protocol."""
        return self.listener_protocols()[listener]

    def listener_protocols(self) -> dict[str, str]:
        """Every listener's security protocol (a listener of `listeners` with none is left out: building the
        listener set refuses it)."""
        declared = parse_endpoints("listeners", self.listeners)
        names = list(LISTENERS) + [n for n in declared if n not in LISTENERS]
        mapped = parse_map("listener.security.protocol.map", self.listener_security_protocol_map, SECURITY_PROTOCOLS)
        for name in mapped:
            if name not in names and name not in SECURITY_PROTOCOLS:  # Kafka's default map names the protocols
                raise InvalidConfigError(f"listener.security.protocol.map names {name}, which is not a listener")
        out: dict[str, str] = {}
        for name in names:
            protocol = mapped.get(name) or default_protocol(name, self.security_protocol)
            if protocol is not None:
                out[name] = protocol
        if BROKER not in mapped:
            out[BROKER] = out[NATIVE]  # brokers keep the native listener's protection unless told otherwise
        return out

    def enabled_mechanisms(self, listener: str | None = None) -> list[str]:
        """sasl.enabled.mechanisms, or a listener's own (Kafka's listener.name.<name>.sasl.enabled.mechanisms)."""
        value, key_name = self.sasl_enabled_mechanisms, "sasl.enabled.mechanisms"
        if listener is not None and listener in self.listener_mechanisms:
            value = self.listener_mechanisms[listener]
            key_name = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
        mechs = [m.strip().upper() for m in value.split(",") if m.strip()]
        bad = [m for m in mechs if m not in SASL_MECHANISMS]
        if bad:
            raise InvalidConfigError(f"{key_name}: {', '.join(bad)} not one of {', '.join(SASL_MECHANISMS)}")
        return mechs

    def super_user_set(self) -> frozenset[str]:
        users = parse_super_users(self.super_users)
        if self.cluster_secret() is not None and not uses_sasl(self.listener_protocol("BROKER")):
            users |= {f"User:{SECRET_USER}"}  # whoever proved the cluster secret is a broker
        return users

    def validate_security(self) -> None:
        protocols = self.listener_protocols()
        self.enabled_mechanisms()
        for name in self.listener_mechanisms:
            if name not in protocols:
                raise InvalidConfigError(f"listener.name.{name.lower()}.sasl.enabled.mechanisms: no listener {name}")
        if any(uses_sasl(p) and not self.enabled_mechanisms(n) for n, p in protocols.items()):
            raise InvalidConfigError("a SASL listener needs sasl.enabled.mechanisms")
        if any(uses_ssl(p) for p in protocols.values()) and not self.ssl_keystore_location:
            raise InvalidConfigError("an SSL listener needs ssl.keystore.location (PEM key and certificate chain)")
        if self.ssl_client_auth != "none" and not self.ssl_truststore_location:
            raise InvalidConfigError(f"ssl.client.auth={self.ssl_client_auth} needs ssl.truststore.location")
        if self.sasl_jaas_config:
            parse_jaas(self.sasl_jaas_config)
        secret = self.cluster_secret()  # a bad secret file fails the start, not the first peer connection
        if secret is not None and len(secret) < 16:
            raise InvalidConfigError("inter.broker.secret must be at least 16 characters")

    def server_ssl_context(self) -> ssl.SSLContext:
        """TLS for this broker's SSL/SASL_SSL listeners."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.ssl_truststore_location)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        assert self.ssl_keystore_location is not None  # validate() requires it with an SSL listener
        ctx.load_cert_chain(self.ssl_keystore_location, password=self.ssl_key_password)
        ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
            self.ssl_client_auth
        ]
        return ctx

    def cluster_secret(self) -> str | None:
        """inter.broker.secret, or the one line of inter.broker.secret.file (refused when others may read it)."""
        if self.inter_broker_secret:
            return self.inter_broker_secret
        if not self.inter_broker_secret_file:
            return None
        path = Path(self.inter_broker_secret_file)
        try:
            mode = path.stat().st_mode
            secret = path.read_text().strip()
        except OSError as e:
            raise InvalidConfigError(f"inter.broker.secret.file: {e.strerror}: {path}") from None
        if mode & 0o077:
            raise InvalidConfigError(f"inter.broker.secret.file {path} may be read by others: chmod 600 it")
        if len(secret) < 16:
            raise InvalidConfigError(f"inter.broker.secret.file {path}: the secret must be at least 16 characters")
        return secret

    def broker_protocol(self) -> tuple[str, bool]:
        """The inter-broker listener's protocol, and whether its login is the cluster secret's: a listener
        without SASL of its own gets a SASL login over the secret when one is configured."""
        protocol = self.listener_protocol("BROKER")
        if uses_sasl(protocol) or self.cluster_secret() is None:
            return protocol, False
        return ("SASL_SSL" if uses_ssl(protocol) else "SASL_PLAINTEXT"), True

    def inter_broker_security(self) -> ClientSecurity:
        """How this broker connects to the others' inter-broker listener: its protocol, this broker's login
        (sasl.jaas.config, or the cluster secret) and its certificate (presented for mutual TLS)."""
        protocol, by_secret = self.broker_protocol()
        if by_secret:
            return self._client_security(protocol, SECRET_MECHANISM, SECRET_USER, self.cluster_secret())
        return self._client_security(protocol)

    def native_client_security(self) -> ClientSecurity:
        """How this broker asks another's NATIVE listener where its inter-broker listener is (ApiVersions)."""
        return self._client_security(self.listener_protocol("NATIVE"))

    def _client_security(
        self, protocol: str, mechanism: str | None = None, username: str | None = None, password: str | None = None
    ) -> ClientSecurity:
        if username is None and self.sasl_jaas_config:
            username, password = parse_jaas(self.sasl_jaas_config)
        return ClientSecurity(
            protocol=protocol,
            sasl_mechanism=mechanism or self.sasl_mechanism_inter_broker_protocol,
            sasl_username=username,
            sasl_password=password,
            ssl_ca_location=self.ssl_truststore_location,
            ssl_certificate_location=self.ssl_keystore_location if uses_ssl(protocol) else None,
            ssl_key_location=self.ssl_keystore_location if uses_ssl(protocol) else None,
            ssl_key_password=self.ssl_key_password,
            ssl_endpoint_identification_algorithm=self.ssl_endpoint_identification_algorithm or "none",
        )
