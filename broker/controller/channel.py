"""ControllerChannel: this broker's way to the active controller, wherever it is.

Metadata changes are the active controller's to make. A broker that serves a request needing one (a topic
created automatically, __consumer_offsets on the first FindCoordinator, a client's CreateTopics sent to any
broker), proposes an ISR change, or registers its Kafka listener reaches the controller through here: the
local `ControllerService` when this broker is the controller, else a request to the controller's broker
(Kafka's BrokerToControllerChannelManager, and its ForwardingManager for client requests, KIP-590).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from broker.network.server import ConnectionContext
from net.errors import ErrorCode, KafkaLiteError, error_for
from net.messages import MessageError, decode, encode
from net.protocol import ApiKey
from net.schema.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from net.schema.messages import MESSAGES

if TYPE_CHECKING:
    from broker.controller.service import ControllerService
    from broker.network.peers import BrokerPeers
    from election.coordination import Coordination

log = logging.getLogger("kafkalite.api")
T = TypeVar("T")
CONTROLLER_REQUEST_TIMEOUT_S = 10.0
FORWARD_TIMEOUT_S = 30.0  # a client's metadata change forwarded to the controller


class ForwardedContext(ConnectionContext):
    """The context of a typed request another broker forwarded in an ENVELOPE: the connection is the broker's,
    the principal, client id and Kafka version the client's (for quotas and logs). The sending broker authorized
    the request; the envelope needed CLUSTER_ACTION."""

    __slots__ = ("_principal",)

    def __init__(
        self, broker: ConnectionContext, principal: str, client_id: str | None, kafka_version: int | None = None
    ) -> None:
        super().__init__(broker.peer, broker.listener, broker.auth)
        self._principal = principal
        self.client_id = client_id
        self.kafka_version = kafka_version

    @property
    def principal(self) -> str:
        return self._principal


def envelope(request: Any, ctx: ConnectionContext) -> dict[str, Any]:
    """A typed request as an ENVELOPE body: its api, its typed native body, who sent it, and the Kafka version it was
    made in (absent: a native request), as Kafka's envelope carries the client's request header."""
    body = {
        "api_key": type(request).API_KEY,
        "request": encode(request),
        "principal": ctx.principal,
        "client_id": ctx.client_id,
    }
    if ctx.kafka_version is not None:
        body["kafka_version"] = ctx.kafka_version
    return body


def unwrap(body: dict[str, Any], ctx: ConnectionContext) -> tuple[Any, ForwardedContext]:
    """The typed request an ENVELOPE carries and its context; MessageError for anything else."""
    api = body.get("api_key")
    if api not in MESSAGES or not isinstance(body.get("principal"), str):
        raise MessageError(f"an envelope carries a typed request and its principal (api {api!r})")
    client_id = body.get("client_id")
    version = body.get("kafka_version")
    if version is not None and (type(version) is not int or not 0 <= version <= 0x7FFF):
        raise MessageError(f"an envelope's kafka_version is an int16 version, not {version!r}")
    forwarded = ForwardedContext(ctx, body["principal"], client_id if isinstance(client_id, str) else None, version)
    return decode(MESSAGES[api][0], body.get("request")), forwarded


class ControllerChannel:
    def __init__(
        self, broker_id: int, coordination: "Coordination", controller: "ControllerService", peers: "BrokerPeers"
    ) -> None:
        self.broker_id = broker_id
        self.coordination = coordination
        self.controller = controller
        self.peers = peers

    @property
    def controller_id(self) -> int | None:
        return self.coordination.controller_id

    def _remote_controller(self) -> int:
        controller = self.coordination.controller_id
        if controller is None:
            raise KafkaLiteError("no active controller (an election may be running)", ErrorCode.NOT_CONTROLLER)
        return controller

    async def forward(self, api: ApiKey, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """A client's request, to the controller's broker once: marked forwarded, it is never forwarded again
        (where the controller moved meanwhile, the rows say NOT_CONTROLLER)."""
        return await self.peers.request(self._remote_controller(), api, dict(body, forwarded=True), timeout)

    def serve_or_forward(
        self, api: ApiKey, body: dict[str, Any], local: Callable[[], Awaitable[dict[str, Any]]]
    ) -> Awaitable[dict[str, Any]]:
        """A client's metadata change: served here by `local()` when this broker is the active controller (or
        the request was forwarded to it), else forwarded to the controller once (KIP-590), so a client may send
        it to any broker. Where no controller answers, `local()` runs and its rows say NOT_CONTROLLER.
        The controller answers once every live broker has applied the change (ControllerService.await_published),
        so the client may ask any broker next."""
        if self.controller.ready or body.get("forwarded"):
            return self._published(local())
        return self._forward_or_serve(api, body, local)

    async def _published(self, answer: Awaitable[T]) -> T:
        body = await answer
        await self.controller.await_published()
        return body

    def serve_or_forward_typed(
        self, request: Any, ctx: ConnectionContext, local: Callable[[], Awaitable[T]]
    ) -> Awaitable[T]:
        """serve_or_forward for a typed request: forwarded in an ENVELOPE (Kafka's, KIP-590) with the client's
        principal, and answered with the controller's typed answer; `local()` where no controller answers (its
        rows say NOT_CONTROLLER)."""
        if self.controller.ready or isinstance(ctx, ForwardedContext):
            return self._published(local())
        # The envelope is made now, while the connection's context is this request's (its kafka_version).
        return self._forward_typed(request, envelope(request, ctx), local)

    async def _forward_typed(self, request: Any, wrapped: dict[str, Any], local: Callable[[], Awaitable[T]]) -> T:
        controller = self.coordination.controller_id
        if controller is None or controller == self.broker_id:
            return await self._published(local())
        api = ApiKey(type(request).API_KEY)
        try:
            answer = await self.peers.request(controller, ApiKey.ENVELOPE, wrapped, FORWARD_TIMEOUT_S)
            if answer.get("error_code"):
                raise error_for(answer["error_code"], answer.get("error_message") or "")
            response: T = decode(MESSAGES[api][1], answer.get("response"))
            return response
        except (KafkaLiteError, MessageError, TimeoutError, OSError) as e:
            log.info("could not forward %s to controller %d: %s", api.name, controller, e)
            return await local()

    async def _forward_or_serve(
        self, api: ApiKey, body: dict[str, Any], local: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        controller = self.coordination.controller_id
        if controller is None or controller == self.broker_id:
            return await self._published(local())
        try:
            return await self.forward(api, body, FORWARD_TIMEOUT_S)
        except (KafkaLiteError, TimeoutError, OSError) as e:
            log.info("could not forward %s to controller %d: %s", api.name, controller, e)
            return await local()

    async def create_topic(self, name: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
        """Create a topic on behalf of a request served here. Raises the controller's error
        (TopicAlreadyExistsError included)."""
        if self.controller.ready:
            await self.controller.create_topic(name, partitions, rf, configs)
            return
        topic = CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )
        answer = await self.peers.call(
            self._remote_controller(), CreateTopicsRequest(topics=(topic,)), CONTROLLER_REQUEST_TIMEOUT_S
        )
        row = answer.topics[0]
        if row.error_code:
            raise error_for(row.error_code, row.error_message or "")

    async def register_kafka_endpoint(
        self, host: str | None, port: int, listeners: dict[str, tuple[str, int, str]] | None = None
    ) -> None:
        """Kafka's BrokerRegistration of this broker's Kafka listener and its client listeners (name -> advertised
        host, port, wire); raises when it did not commit."""
        if self.coordination.controller_id == self.broker_id:
            await self.controller.set_kafka_endpoint(self.broker_id, host, port, listeners)
            return
        body: dict[str, Any] = {"broker_id": self.broker_id, "kafka_host": host, "kafka_port": port}
        if listeners is not None:
            body["listeners"] = [[name, *ep] for name, ep in sorted(listeners.items())]
        resp = await self.peers.request(
            self._remote_controller(), ApiKey.BROKER_REGISTRATION, body, CONTROLLER_REQUEST_TIMEOUT_S
        )
        if resp.get("error_code"):
            raise KafkaLiteError(f"error {resp['error_code']}: {resp.get('error_message')}")

    async def alter_partition(self, body: dict[str, Any]) -> tuple[int, str]:
        """One AlterPartition attempt: (error code, message), 0 if committed. Every failure to get an answer
        is a code too (NETWORK_EXCEPTION, NOT_CONTROLLER): the caller decides whether to try again."""
        try:
            controller = self.coordination.controller_id
            if controller == self.broker_id:
                await self.controller.alter_partition(
                    body["topic"],
                    body["partition"],
                    body["leader"],
                    body["leader_epoch"],
                    body["partition_epoch"],
                    body["isr"],
                    body["incarnation"],
                    body["seq"],
                    body["silent"],
                )
                return 0, ""
            if controller is None:
                return int(ErrorCode.NOT_CONTROLLER), "no controller"
            # Through the coordination service where it has a path (ZooKeeper), else to the controller.
            resp = await self.coordination.relay_to_controller(body, CONTROLLER_REQUEST_TIMEOUT_S)
            if resp is None:
                resp = await self.peers.request(controller, ApiKey.ALTER_PARTITION, body, CONTROLLER_REQUEST_TIMEOUT_S)
            return int(resp.get("error_code", 0)), str(resp.get("error_message") or "")
        except KafkaLiteError as e:
            return int(e.code), str(e)
        except (TimeoutError, OSError) as e:
            return int(ErrorCode.NETWORK_EXCEPTION), f"{type(e).__name__}: {e}"
