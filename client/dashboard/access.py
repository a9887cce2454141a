"""Who the console lets in and whose powers it uses: the mode, decided once at start from the command config
and the flags (docs/SECURITY.md, "Console").

- login: a SASL cluster and a command config without credentials (its security.protocol, sasl.mechanism
  and ssl.* say how to connect). Every browser user logs in with their own cluster user name and password
  and the console acts as that user, one client per session: the broker's ACLs decide what each one sees
  and may do. `--allow-user` narrows who may log in; `--read-only` refuses every change on top of the ACLs.
- service: the command config logs in itself (sasl.username, or a client certificate on an SSL cluster).
  Lending that identity to whoever reaches the console is only allowed when the operator says how far:
  `--allow-user NAME...` (those users log in with their own cluster password, which the console checks by
  logging in to a broker as them, and then the service identity acts for them: Redpanda Console's "login,
  then the console's own Kafka user") and/or `--read-only` (without an allow-list: no login, and anyone who
  reaches the console may look at what the identity may describe and read, records included, never change).
- open: no SASL, nothing to log in with; read-only unless `--allow-writes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.config import AdminConfig

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class AccessError(ValueError):
    """Flags that do not make a safe console: the one line kl-dashboard prints before refusing to start."""


@dataclass(frozen=True)
class Access:
    mode: str  # "login" | "service" | "open"
    login_required: bool
    writes: bool  # whether the console itself passes changes on (the ACLs still decide on a SASL cluster)
    allow_users: frozenset[str]  # empty: anyone the cluster accepts (login mode)
    service_identity: str | None  # who acts in service mode
    why_read_only: str = ""  # the 403's message when writes are off

    @property
    def acts_as_user(self) -> bool:
        """Each session has its own client logged in as the user (login mode)."""
        return self.mode == "login"

    def summary(self) -> str:
        """One line for the console's start: what this mode exposes, and to whom."""
        who = f"users {', '.join(sorted(self.allow_users))}" if self.allow_users else "any cluster user"
        rw = "read-write" if self.writes else "read-only"
        if self.mode == "login":
            return f"console mode: login ({who} log in and act as themselves; the broker's ACLs decide; {rw})"
        if self.mode == "service":
            front = f"{who} log in" if self.login_required else "no login: anyone who reaches it"
            return f"console mode: service identity {self.service_identity} ({front}; it acts for them; {rw})"
        return f"console mode: open cluster (no login; {rw})"


def decide(client_config: dict[str, Any], read_only: bool, allow_users: tuple[str, ...], allow_writes: bool) -> Access:
    """The mode for a command config (client keyword arguments) and the flags, or AccessError."""
    cfg = AdminConfig.from_kwargs(client_config)
    sasl = cfg.security_protocol in SASL_PROTOCOLS
    users = frozenset(u.strip() for u in allow_users if u.strip())
    if read_only and allow_writes:
        raise AccessError("--read-only and --allow-writes contradict each other")
    identity = None
    if sasl and cfg.sasl_username:
        identity = f"User:{cfg.sasl_username}"
    elif cfg.security_protocol == "SSL" and cfg.ssl_certificate_location:
        identity = f"the certificate {cfg.ssl_certificate_location}"
    if allow_writes and (sasl or identity):
        raise AccessError(
            "--allow-writes is for open clusters; on a secured cluster the broker's ACLs decide what users change"
        )
    if users and not sasl:
        raise AccessError(
            "--allow-user needs a SASL cluster (security.protocol=SASL_PLAINTEXT or SASL_SSL in --command-config) "
            "to check the users' passwords against"
        )
    if identity is not None:
        if not (read_only or users):
            raise AccessError(
                f"--command-config logs in as {identity} and would lend it to anyone who reaches the console: "
                "add --read-only, or --allow-user NAME for the users who may log in "
                "(or drop sasl.username/sasl.password so that every user logs in as themselves)"
            )
        return Access(
            "service",
            login_required=bool(users),
            writes=not read_only,
            allow_users=users,
            service_identity=identity,
            why_read_only="the console is read-only (--read-only)",
        )
    if sasl:
        return Access("login", True, not read_only, users, None, why_read_only="the console is read-only (--read-only)")
    return Access(
        "open",
        login_required=False,
        writes=allow_writes,
        allow_users=frozenset(),
        service_identity=None,
        why_read_only="the console of an open cluster is read-only: start kl-dashboard with --allow-writes for changes",
    )
