"""Controller logic: decisions about topics, partition leaders and ISR, as records.

Pure and deterministic: given the current `MetadataImage` and an event, return
the metadata records to append to the quorum's log. Nothing takes effect until
those records are committed and applied to every broker's image, so leader
epochs are handed out exactly once, in log order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from broker.controller.leader_balance import preferred_can_lead, preferred_replica
from broker.metadata.image import NO_LEADER, BrokerInfo, MetadataImage, PartitionState, TopicInfo, partition_record
from broker.metadata.naming import validate_topic_name
from broker.metadata.records import (
    AclRecord,
    BrokerConfigRecord,
    BrokerRecord,
    ClientQuotaRecord,
    ConfigRecord,
    GroupConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveAclRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from broker.security.scram import ScramCredential
from net.acl import AclBinding, AclBindingFilter
from net.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    ErrorCode,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    KafkaLiteError,
    NoReassignmentInProgressError,
    PolicyViolationError,
    PreferredLeaderNotAvailableError,
    ResourceNotFoundError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from net.protocol import ElectionType

MAX_PARTITIONS = 10000


@dataclass(frozen=True)
class PartitionLimits:
    """KIP-578's caps on partitions, checked before any record of a creation is written, so a request over
    either creates nothing. `max_partitions` counts the cluster's partitions (each once, whatever its
    replication factor), `max_broker_partitions` the replicas one broker hosts (what costs it files, memory
    and fetcher work). Unlimited here; the broker's max.partitions / max.broker.partitions set them."""

    max_partitions: int = 2**31 - 1
    max_broker_partitions: int = 2**31 - 1


class AlterPartitionError(KafkaLiteError):
    """The controller refused an AlterPartition. The code tells the leader whether its proposal may have been
    applied after all (Kafka's codes; broker/replica/replication.py alter_partition_outcome decides from it):

    - FENCED_LEADER_EPOCH: the proposer is not the leader, or not in the current leader epoch;
    - INVALID_UPDATE_VERSION: the partition epoch it is based on is stale;
    - STALE_BROKER_EPOCH: it comes from an earlier process of the leader (see check_broker_incarnation).
      For these three the partition has moved on, possibly by this very proposal, sent before and
      committed without its answer reaching the leader: the leader keeps it pending until metadata says.
    - INELIGIBLE_REPLICA: judged against the current state and refused (a fenced broker, an invalid ISR):
      definitely not applied, by this controller or any other, so the leader may forget it.
    """

    code = ErrorCode.FENCED_LEADER_EPOCH


class ControllerLogic:
    """Turns requests and broker liveness changes into metadata records."""

    def __init__(
        self,
        image: MetadataImage,
        unclean_default: bool = False,
        min_insync_default: int = 1,
        limits: PartitionLimits = PartitionLimits(),
    ) -> None:
        self.image = image
        self.limits = limits
        self.unclean_default = unclean_default
        self.min_insync_default = min_insync_default  # the broker's min.insync.replicas, for topics without one
        # (topic, partition, new leader, lost ISR): reported by the driver, which may log (this class may not).
        self.unclean_elections: list[tuple[str, int, int, list[int]]] = []
        # (topic, partition, old leader, new leader) of AlterPartition requests answered by moving leadership
        # (see alter_partition); the driver reports them and answers the leader accordingly.
        self.leader_moves: list[tuple[str, int, int, int]] = []
        # (topic, partition, final replicas) of reassignments an AlterPartition completed (the leader epoch moved).
        self.reassignments_completed: list[tuple[str, int, list[int]]] = []

    # --- topics --------------------------------------------------------------

    def create_topic(
        self,
        name: object,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignments: object = None,
    ) -> list[MetadataRecord]:
        """`assignments`: Kafka's manual replica assignment, [[partition, [broker, ...]], ...] for partitions
        0..n-1, with `num_partitions` and `replication_factor` -1; else the controller places the replicas."""
        name = validate_topic_name(name)
        if name in self.image.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaLiteError(
                    "a manual replica assignment was given, but num_partitions and replication_factor were not -1",
                    ErrorCode.INVALID_REQUEST,
                )
            by_partition = self._assignment_rows(assignments)
            if sorted(by_partition) != list(range(len(by_partition))):
                raise InvalidReplicaAssignmentError(
                    f"the partitions of a manual assignment must be 0..n-1, got {sorted(by_partition)}"
                )
            placed = self._checked_placement([by_partition[p] for p in range(len(by_partition))], None)
            return self._new_topic_records(name, configs, placed)
        if not isinstance(num_partitions, int) or not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be between 1 and {MAX_PARTITIONS}")
        live = self.image.live_brokers()
        if not isinstance(replication_factor, int) or replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be >= 1, got {replication_factor}")
        if replication_factor > len(live):
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the number of available brokers ({len(live)})"
            )
        # Spread leaders and replicas round-robin, starting where existing leaderships are fewest.
        start = min(range(len(live)), key=lambda i: (self.image.leaderships(live[i]), live[i]))
        placed = [[live[(start + p + r) % len(live)] for r in range(replication_factor)] for p in range(num_partitions)]
        return self._new_topic_records(name, configs, placed)

    def _new_topic_records(self, name: str, configs: dict[str, str], placed: list[list[int]]) -> list[MetadataRecord]:
        self._check_limits(placed)
        records: list[MetadataRecord] = [TopicRecord(name, uuid.uuid4().hex, dict(configs))]
        return records + self._partition_records(name, 0, placed)

    def _partition_records(self, topic: str, first: int, placed: list[list[int]]) -> list[MetadataRecord]:
        """Partitions first.. with these replica lists: the first live replica leads, the live ones are the ISR
        (every one of them, for a placement made from the live brokers)."""
        live = set(self.image.live_brokers())
        records: list[MetadataRecord] = []
        for p, replicas in enumerate(placed, start=first):
            isr = [b for b in replicas if b in live]
            records.append(PartitionRecord(topic, p, isr[0], 0, list(replicas), isr, 0))
        return records

    @staticmethod
    def _assignment_rows(assignments: object) -> dict[int, list[int]]:
        """[[partition, [broker, ...]], ...] -> {partition: brokers}, the shape checked."""
        out: dict[int, list[int]] = {}
        rows = assignments if isinstance(assignments, list) else None
        for row in rows or [None]:
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], int) and isinstance(row[1], list)):
                raise KafkaLiteError("a replica assignment is [partition, [broker id, ...]]", ErrorCode.INVALID_REQUEST)
            if row[0] in out:
                raise InvalidReplicaAssignmentError(f"partition {row[0]} is assigned twice")
            out[row[0]] = row[1]
        return out

    def _checked_placement(self, placed: list[Any], rf: int | None) -> list[list[int]]:
        """Kafka's checks of manual replica lists: broker ids, no broker twice, every broker registered, one
        replication factor (`rf`: the topic's, when it grows), and a live broker in each to lead it."""
        if not placed or len(placed) > MAX_PARTITIONS:
            raise InvalidReplicaAssignmentError(f"a manual assignment names 1 to {MAX_PARTITIONS} partitions")
        live = set(self.image.live_brokers())
        for p, replicas in enumerate(placed):
            if not replicas or not all(isinstance(b, int) and not isinstance(b, bool) for b in replicas):
                raise InvalidReplicaAssignmentError(f"partition {p}'s replicas must be a non-empty list of broker ids")
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(f"partition {p}'s replicas {replicas} contain a broker twice")
            unknown = [b for b in replicas if b not in self.image.brokers]
            if unknown:
                raise InvalidReplicaAssignmentError(f"partition {p}'s replicas name unknown brokers {unknown}")
            want = rf if rf is not None else len(placed[0])
            if len(replicas) != want:
                raise InvalidReplicaAssignmentError(
                    f"partition {p} has {len(replicas)} replicas, but the topic's partitions have {want}"
                )
            if not live.intersection(replicas):
                raise InvalidReplicaAssignmentError(f"partition {p}'s replicas {replicas} are all fenced or offline")
        return [list(r) for r in placed]

    def _check_limits(self, placed: list[list[int]]) -> None:
        """POLICY_VIOLATION naming the cap if the new partitions (their replica lists) would pass one."""
        lim = self.limits
        existing = sum(len(t.partitions) for t in self.image.topics.values())
        if existing + len(placed) > lim.max_partitions:
            raise PolicyViolationError(
                f"creating {len(placed)} partitions would bring the cluster to {existing + len(placed)}, "
                f"above max.partitions={lim.max_partitions}"
            )
        added: dict[int, int] = {}
        for replicas in placed:
            for b in replicas:
                added[b] = added.get(b, 0) + 1
        hosted = dict.fromkeys(added, 0)
        for t in self.image.topics.values():
            for st in t.partitions.values():
                for b in st.replicas:
                    if b in hosted:
                        hosted[b] += 1
        for b in sorted(added):
            if hosted[b] + added[b] > lim.max_broker_partitions:
                raise PolicyViolationError(
                    f"creating {len(placed)} partitions would place {hosted[b] + added[b]} partition replicas on "
                    f"broker {b}, above max.broker.partitions={lim.max_broker_partitions}"
                )

    def create_partitions(self, name: object, total: object, assignments: object = None) -> list[MetadataRecord]:
        """Grow a topic to `total` partitions (Kafka's CreatePartitions): the new ones get the topic's replication
        factor, spread round-robin over the live brokers as at creation, or `assignments` (one replica list per
        new partition). Partitions are never removed."""
        t = self.image.topics.get(name) if isinstance(name, str) else None
        if t is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        current = len(t.partitions)
        if not isinstance(total, int) or not current < total <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; the new count must be above it and at most {MAX_PARTITIONS}"
            )
        rf = len(next(iter(t.partitions.values())).replicas)
        if assignments:
            if not isinstance(assignments, list) or len(assignments) != total - current:
                given = len(assignments) if isinstance(assignments, list) else 0
                raise InvalidReplicaAssignmentError(
                    f"adding {total - current} partitions to {name!r}, but {given} replica assignments were given"
                )
            placed = self._checked_placement(assignments, rf)
            self._check_limits(placed)
            return self._partition_records(t.name, current, placed)
        live = self.image.live_brokers()
        if rf > len(live):
            raise InvalidReplicationFactorError(
                f"the topic's replication factor {rf} is larger than the number of available brokers ({len(live)})"
            )
        start = min(range(len(live)), key=lambda i: (self.image.leaderships(live[i]), live[i]))
        placed = [[live[(start + n + r) % len(live)] for r in range(rf)] for n in range(total - current)]
        self._check_limits(placed)
        return self._partition_records(t.name, current, placed)

    def delete_topic(self, name: object) -> list[MetadataRecord]:
        if not isinstance(name, str) or name not in self.image.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return [RemoveTopicRecord(name)]

    def set_configs(self, name: str, configs: dict[str, str]) -> list[MetadataRecord]:
        t = self.image.topics.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        # Enabling unclean.leader.election.enable must bring offline partitions back, as in Kafka.
        changed = TopicInfo(t.name, t.topic_id, t.partitions, dict(configs))
        live = set(self.image.live_brokers())
        records: list[MetadataRecord] = [ConfigRecord(name, dict(configs))]
        return records + self._elect_offline([changed], live)

    def set_group_configs(self, group: str, configs: dict[str, str]) -> list[MetadataRecord]:
        """A group's whole set of config overrides (none: the record removes them)."""
        return [GroupConfigRecord(group, dict(configs))]

    def set_broker_configs(self, broker: str, configs: dict[str, str]) -> list[MetadataRecord]:
        """A broker's whole set of dynamic configs ("" : the cluster default's), validated by the caller
        (broker/server/dynamic_config.py); an empty set removes it."""
        return [BrokerConfigRecord(broker, dict(configs))]

    # --- security: credentials, ACLs, quotas (validated by the callers; these only make the records) --------

    def alter_scram(
        self, upserts: list[tuple[str, ScramCredential]], deletions: list[tuple[str, str]]
    ) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for user, mech in deletions:
            if (user, mech) not in self.image.scram_credentials:
                raise ResourceNotFoundError(f"user {user!r} has no {mech} credential")
            records.append(RemoveUserScramCredentialRecord(user, mech))
        records += [UserScramCredentialRecord.of(user, cred) for user, cred in upserts]
        return records

    def create_acls(self, bindings: list[AclBinding]) -> list[MetadataRecord]:
        return [AclRecord(b) for b in bindings if b not in self.image.acls]

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[MetadataRecord]:
        doomed = sorted({b for b in self.image.acls for f in filters if f.matches(b)})
        return [RemoveAclRecord(b) for b in doomed]

    def alter_client_quota(
        self, entity: list[tuple[str, str | None]], values: dict[str, float | None]
    ) -> list[MetadataRecord]:
        """`values` maps quota keys to a new value, or None to remove it (the others are kept)."""
        current: dict[str, float | None] = dict(self.image.client_quotas.get(tuple(entity), {}))
        for k, v in values.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v
        return [ClientQuotaRecord(tuple((k, v) for k, v in entity), current)]

    def _elect_offline(self, topics: list[TopicInfo], live: set[int]) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for t in topics:
            for p in t.partitions.values():
                if p.leader == NO_LEADER:
                    new = self._elect(t, p, live, exclude=set())
                    if new is not None:
                        records.append(partition_record(t.name, new))
        return records

    # --- brokers -------------------------------------------------------------

    def register_broker(self, broker_id: int, host: str, port: int) -> list[MetadataRecord]:
        """A broker that fetches again is unfenced; its partitions regain leaders if they had none."""
        b = self.image.brokers.get(broker_id)
        if b is not None and not b.fenced and (b.host, b.port) == (host, port):
            return []
        records: list[MetadataRecord] = [_broker_record(broker_id, host, port, False, b)]
        live = set(self.image.live_brokers()) | {broker_id}
        mine = [t for t in self.image.topics.values() if any(broker_id in p.replicas for p in t.partitions.values())]
        return records + self._elect_offline(mine, live)

    def set_kafka_endpoint(
        self,
        broker_id: int,
        host: str | None,
        port: int,
        listeners: dict[str, tuple[str, int, str]] | None = None,
    ) -> list[MetadataRecord]:
        """Record where clients reach `broker_id` (its BrokerRegistration): its Kafka listener and, unless None (a
        broker from before named listeners), every client listener; nothing if unchanged or unknown (a broker
        not registered yet: its registration record will carry what it sent since)."""
        b = self.image.brokers.get(broker_id)
        if listeners is None:
            listeners = b.listeners if b is not None else {}
        if b is None or (b.kafka_host, b.kafka_port, b.listeners) == (host, port, listeners):
            return []
        known = BrokerInfo(broker_id, b.host, b.port, b.fenced, host, port, dict(listeners))
        return [_broker_record(broker_id, b.host, b.port, b.fenced, known)]

    def fence_broker(self, broker_id: int) -> list[MetadataRecord]:
        """Remove a lost broker from every ISR at once and move its leaderships (Kafka's controller does this)."""
        b = self.image.brokers.get(broker_id)
        if b is None or b.fenced:
            return []
        records: list[MetadataRecord] = [_broker_record(broker_id, b.host, b.port, True, b)]
        live = set(self.image.live_brokers()) - {broker_id}
        for t in self.image.topics.values():
            for p in t.partitions.values():
                if broker_id not in p.replicas:
                    continue
                if p.leader == broker_id:
                    new = self._elect(t, p, live, exclude={broker_id})
                    if new is None:
                        # Like Kafka, never empty the ISR: the last member stays, so only it (or an
                        # unclean election) can lead again and nothing it acknowledged is lost.
                        isr = _isr_without(p.isr, broker_id) or list(p.isr)
                        new = replace(
                            p,
                            leader=NO_LEADER,
                            leader_epoch=p.leader_epoch + 1,
                            isr=isr,
                            partition_epoch=p.partition_epoch + 1,
                        )
                    records.append(partition_record(t.name, new))
                elif broker_id in p.isr and len(p.isr) > 1:
                    new = replace(p, isr=_isr_without(p.isr, broker_id), partition_epoch=p.partition_epoch + 1)
                    records.append(partition_record(t.name, new))
        return records

    def _elect(
        self, t: TopicInfo, p: PartitionState, live: set[int], exclude: set[int], force_unclean: bool = False
    ) -> PartitionState | None:
        """A new leader from the ISR (or, if allowed or forced, any live replica), with a bumped leader epoch.

        Among eligible replicas the tie-break is the proposal's: fewest current leaderships, then lowest id.
        """
        candidates = [r for r in p.isr if r in live and r not in exclude]
        unclean = False
        if not candidates:
            if not (force_unclean or _unclean_enabled(t, self.unclean_default)):
                return None
            candidates = [r for r in p.replicas if r in live and r not in exclude]
            unclean = True
            if not candidates:
                return None
        leader = min(candidates, key=lambda r: (self.image.leaderships(r), r))
        isr = [leader] if unclean else [r for r in p.isr if r not in exclude]
        new = replace(p, leader=leader, leader_epoch=p.leader_epoch + 1, isr=isr, partition_epoch=p.partition_epoch + 1)
        if unclean:
            self.unclean_elections.append((t.name, p.partition, leader, list(p.isr)))
        return new

    # --- leader elections asked for (Kafka's ElectLeaders) and the automatic rebalance ------------

    def elect_leaders(
        self, election_type: ElectionType, partitions: list[tuple[str, int]] | None
    ) -> tuple[list[MetadataRecord], dict[tuple[str, int], KafkaLiteError | None]]:
        """The records of the elections that can be made, and each partition's outcome (None: elected).
        `partitions` None means every partition; then those already led as asked are left out of the
        outcomes, as Kafka's controller does."""
        everything = partitions is None
        if partitions is None:
            partitions = [(t.name, p) for t in self.image.topics.values() for p in sorted(t.partitions)]
        records: list[MetadataRecord] = []
        outcomes: dict[tuple[str, int], KafkaLiteError | None] = {}
        for topic, partition in dict.fromkeys(partitions):  # a partition asked for twice is elected once
            try:
                records += self.elect_leader(topic, partition, election_type)
                outcomes[(topic, partition)] = None
            except ElectionNotNeededError as e:
                if not everything:
                    outcomes[(topic, partition)] = e
            except KafkaLiteError as e:
                outcomes[(topic, partition)] = e
        return records, outcomes

    def elect_leader(self, topic: object, partition: object, election_type: ElectionType) -> list[MetadataRecord]:
        """PREFERRED: the first replica leads, if it is alive and in the ISR (a clean election, the ISR is
        kept). UNCLEAN: a partition without a leader gets one from the live ISR members, else from any live
        replica whatever the topic's unclean.leader.election.enable (records only the ISR had may be lost).
        Raises Kafka's per-partition errors."""
        t = self.image.topics.get(topic) if isinstance(topic, str) else None
        p = t.partitions.get(partition) if t is not None and isinstance(partition, int) else None
        if t is None or p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        live = set(self.image.live_brokers())
        if election_type == ElectionType.PREFERRED:
            preferred = preferred_replica(p)
            if p.leader == preferred:
                raise ElectionNotNeededError(f"{topic}-{partition} is led by its preferred replica {preferred}")
            if preferred is None or not preferred_can_lead(p, live):
                state = "not alive" if preferred not in live else f"not in the ISR {p.isr}"
                raise PreferredLeaderNotAvailableError(
                    f"{topic}-{partition}: its preferred replica {preferred} is {state}"
                )
            new = replace(p, leader=preferred, leader_epoch=p.leader_epoch + 1, partition_epoch=p.partition_epoch + 1)
            return [partition_record(t.name, new)]
        if p.leader != NO_LEADER:
            raise ElectionNotNeededError(f"{topic}-{partition} has a leader (broker {p.leader})")
        elected = self._elect(t, p, live, exclude=set(), force_unclean=True)
        if elected is None:
            raise EligibleLeadersNotAvailableError(f"{topic}-{partition}: none of its replicas {p.replicas} is alive")
        return [partition_record(t.name, elected)]

    # --- partition reassignments (Kafka's AlterPartitionReassignments / ListPartitionReassignments, KIP-455) ---

    def alter_reassignments(
        self, requests: list[tuple[object, object, object]], allow_rf_change: bool = True
    ) -> tuple[list[MetadataRecord], dict[tuple[str, int], KafkaLiteError | None]]:
        """(topic, partition, target replicas or None to cancel) -> the records, and each partition's outcome
        (None: done). A partition named twice is judged once, on its first row."""
        records: list[MetadataRecord] = []
        outcomes: dict[tuple[str, int], KafkaLiteError | None] = {}
        for topic, partition, target in requests:
            key = (str(topic), partition if isinstance(partition, int) else -1)
            if key in outcomes:
                continue
            try:
                records += self.reassign(topic, partition, target, allow_rf_change)
                outcomes[key] = None
            except KafkaLiteError as e:
                outcomes[key] = e
        return records, outcomes

    def reassign(
        self, topic: object, partition: object, target: object, allow_rf_change: bool = True
    ) -> list[MetadataRecord]:
        """Start (or replace) a reassignment towards `target`, or cancel the one in progress (`target` None).
        While it runs the replicas are target + the original ones not in it, so the new replicas are created
        and catch up from the leader; it completes once every target replica is in the ISR
        (_complete_reassignment), at once when they already are (a reorder or a pure removal)."""
        t = self.image.topics.get(topic) if isinstance(topic, str) else None
        p = t.partitions.get(partition) if t is not None and isinstance(partition, int) else None
        if t is None or p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        original = p.original_replicas
        if target is None:
            if not p.reassigning:
                raise NoReassignmentInProgressError(f"{topic}-{partition} has no reassignment in progress")
            reverted = self._with_replicas(p, original, [], [])
            if reverted is None:
                raise InvalidReplicaAssignmentError(
                    f"{topic}-{partition}: no replica of its original assignment {original} is in the ISR {p.isr}"
                )
            return [partition_record(t.name, reverted)]
        if not isinstance(target, (list, tuple)):
            raise InvalidReplicaAssignmentError(f"{topic}-{partition}: the target replicas must be a list")
        wanted = self._checked_placement([list(target)], None)[0]
        if not allow_rf_change and len(wanted) != len(original):
            raise InvalidReplicationFactorError(
                f"{topic}-{partition}: the target {wanted} changes the replication factor {len(original)}"
            )
        if wanted == p.replicas and not p.reassigning:
            return []  # already placed so: nothing to do, as in Kafka
        replicas = wanted + [r for r in original if r not in wanted]
        adding = [r for r in wanted if r not in original]
        removing = [r for r in original if r not in wanted]
        moving = self._with_replicas(p, replicas, adding, removing)
        if moving is None:  # the leader and every ISR member are being dropped from a replaced reassignment
            raise InvalidReplicaAssignmentError(f"{topic}-{partition}: no replica of {replicas} is in the ISR {p.isr}")
        return [partition_record(t.name, self._complete_reassignment(moving) or moving)]

    def _with_replicas(
        self, p: PartitionState, replicas: list[int], adding: list[int], removing: list[int]
    ) -> PartitionState | None:
        """`p` with a new replica set: the ISR keeps its members that remain, the leader stays if it remains,
        else the first remaining ISR member in replica order leads (a clean election). The leader epoch moves
        in every case: a leader's LeaderState knows its replica set only from the start of its epoch, as the
        followers it waits for and takes into the ISR. None: no ISR member remains."""
        isr = [r for r in p.isr if r in replicas]
        if not isr:
            return None
        leader = p.leader if p.leader in isr else next(r for r in replicas if r in isr)
        return replace(
            p,
            leader=leader,
            leader_epoch=p.leader_epoch + 1,
            replicas=list(replicas),
            isr=isr,
            partition_epoch=p.partition_epoch + 1,
            adding_replicas=list(adding),
            removing_replicas=list(removing),
        )

    def _complete_reassignment(self, p: PartitionState) -> PartitionState | None:
        """Once every target replica is in the ISR, the final replica set: the removed replicas leave (they stop
        and delete their logs when they apply it), the leader moves to the first target replica if it is one of
        them. None: not reassigning, or not caught up yet."""
        if not p.reassigning or not set(p.target_replicas) <= set(p.isr):
            return None
        return self._with_replicas(p, p.target_replicas, [], [])

    def list_reassignments(self, partitions: list[tuple[str, int]] | None) -> list[tuple[str, PartitionState]]:
        """The reassignments in progress, of `partitions` (None: all); unknown ones are left out, as Kafka does."""
        found = []
        for t in self.image.topics.values():
            for p in t.partitions.values():
                if p.reassigning and (partitions is None or (t.name, p.partition) in partitions):
                    found.append((t.name, p))
        return sorted(found, key=lambda row: (row[0], row[1].partition))

    # --- ISR changes from partition leaders -------------------------------------

    def alter_partition(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: list[int],
        silent: list[int] | None = None,
    ) -> list[MetadataRecord]:
        """A leader's ISR proposal. `silent`: the members it drops that sent it no fetch within
        replica.lag.time.max.ms (None: a proposer that does not say, treated as none silent)."""
        t = self.image.topics.get(topic)
        p = t.partitions.get(partition) if t is not None else None
        if t is None or p is None:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if leader_id != p.leader or leader_epoch != p.leader_epoch:
            raise AlterPartitionError(
                f"{topic}-{partition}: broker {leader_id} epoch {leader_epoch} is not the leader",
                ErrorCode.FENCED_LEADER_EPOCH,
            )
        if partition_epoch != p.partition_epoch:
            raise AlterPartitionError(
                f"{topic}-{partition}: partition epoch {partition_epoch} is stale (now {p.partition_epoch})",
                ErrorCode.INVALID_UPDATE_VERSION,
            )
        # From here on the proposal is judged against the current state, so a refusal means it was not applied.
        if leader_id not in isr or any(r not in p.replicas for r in isr):
            raise AlterPartitionError(f"{topic}-{partition}: invalid ISR {isr}", ErrorCode.INELIGIBLE_REPLICA)
        live = set(self.image.live_brokers())
        fenced = [r for r in isr if r not in live and r != leader_id]
        if fenced:
            # Rejected rather than filtered: a silently shrunk ISR would be re-proposed forever.
            raise AlterPartitionError(
                f"{topic}-{partition}: brokers {fenced} are fenced; retry once registered", ErrorCode.INELIGIBLE_REPLICA
            )
        moved = self._move_isolated_leader(t, p, isr, silent or [])
        if moved is not None:
            self.leader_moves.append((topic, partition, leader_id, moved.leader))
            return [partition_record(topic, moved)]
        new = replace(p, isr=isr, partition_epoch=p.partition_epoch + 1)
        done = self._complete_reassignment(new)
        if done is not None:
            self.reassignments_completed.append((topic, partition, list(done.replicas)))
            return [partition_record(topic, done)]
        return [partition_record(topic, new)]

    def _move_isolated_leader(
        self, t: TopicInfo, p: PartitionState, isr: list[int], silent: list[int]
    ) -> PartitionState | None:
        """A leader asking to shrink its ISR below min.insync.replicas, although at least that many of the
        members it drops are live (registered) and `silent` (it heard no fetch from them within the lag time),
        is cut off from them, not they from the cluster: they stopped fetching from it, yet they reach the
        controller (or ZooKeeper). Shrinking would leave the partition refusing acks=all writes
        (NOT_ENOUGH_REPLICAS) for as long as the cut lasts, with enough in-sync replicas alive to take them.
        Instead the leadership moves to one of the silent ones, chosen as when a leader is fenced, and the old
        leader (and any member it dropped as slow) leaves the ISR. That is a clean election (every ISR member
        has everything acknowledged), so no acknowledged record is lost; the old leader truncates its
        unacknowledged tail when it follows again. Kafka shrinks and refuses writes; ELECTION.md section 6
        says why this differs.

        Members dropped for being slow (fetching, not caught up) do not count: an overloaded cluster is not a
        cut, and handing the leadership to a replica that lags would truncate the old leader's acks=1 records
        it lacks. That is an ordinary shrink, as in Kafka. A proposer that sends no `silent` (older than the
        field) gets the ordinary shrink too: a move needs evidence. None: an ordinary shrink."""
        need = min(_min_insync(t, self.min_insync_default), len(p.replicas))
        if len(isr) >= need or not set(isr) < set(p.isr):
            return None
        live = set(self.image.live_brokers())
        dropped = [r for r in p.isr if r not in isr]
        cut_off = [r for r in dropped if r in live and r in silent]
        if len(cut_off) < need:
            return None
        slow = {r for r in dropped if r not in cut_off}
        return self._elect(t, p, live, exclude={p.leader} | slow)


def check_broker_incarnation(broker_id: int, incarnation: int | None, newest: int) -> None:
    """Refuse an AlterPartition from an earlier process of `broker_id` than the newest one the controller has
    seen (Kafka's broker epoch check, KIP-497/KIP-903). A leader that restarts within its session keeps its
    leader epoch, and its new LeaderState computes the HW over the ISR it read from metadata; a proposal its
    previous process sent, if still accepted, adds a replica that HW is not waiting for, and the HW can pass
    it. `newest` is the highest incarnation seen in the broker's metadata fetches (broker/controller/quorum_driver.py);
    `incarnation` None is a proposer that sends none, which is not checked. tests/sim/replication_sim.py applies
    the same rule in its controller."""
    if incarnation is not None and incarnation < newest:
        raise AlterPartitionError(
            f"broker {broker_id} incarnation {incarnation} is stale (a newer process, {newest}, has fetched)",
            ErrorCode.STALE_BROKER_EPOCH,
        )


def _isr_without(isr: list[int], broker_id: int) -> list[int]:
    return [r for r in isr if r != broker_id]


def _min_insync(t: TopicInfo, default: int) -> int:
    try:
        return int(t.configs.get("min.insync.replicas", default))
    except (TypeError, ValueError):
        return default


def _unclean_enabled(t: TopicInfo, default: bool) -> bool:
    v = t.configs.get("unclean.leader.election.enable")
    return default if v is None else str(v).lower() == "true"


def _broker_record(broker_id: int, host: str, port: int, fenced: bool, known: BrokerInfo | None) -> BrokerRecord:
    """A broker registration record; it keeps the broker's Kafka listener and other listeners from `known` (the
    image), so fencing and unfencing never lose them."""
    if known is None:
        return BrokerRecord(broker_id, host, port, fenced)
    kafka_host, kafka_port = (known.kafka_host, known.kafka_port) if known.kafka_port >= 0 else (None, -1)
    return BrokerRecord(broker_id, host, port, fenced, kafka_host, kafka_port, dict(known.listeners))
