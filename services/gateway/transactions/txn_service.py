"""The TransactionCoordinator gRPC service (proto/seglog/v1/transactions.proto): an adapter
over the transaction coordinator (coordinator.py, queries.py) and the groups core's
transactional offsets, the same typed calls the Kafka port's adapter makes (kafka/txn_apis.py,
kafka/txn_offset_commit_apis.py); no Kafka codec here, and no gRPC status there.

Each method names the call's Caller, builds the core's typed arguments and encodes its answer;
the core authorizes. A refusal fails the call whole as a gRPC status carrying the seglog
reason (the client raises the typed error: ProducerFencedError and so on)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from seglog.errors import InvalidRequestError, SeglogError
from seglog.rpc.status import abort, error_code_for
from seglog.security.certs import GATEWAY_IDENTITY
from seglog.security.tls import peer_identity
from seglog.v1 import transactions_pb2 as pb

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from ..groups.group_state import OffsetToCommit
from ..groups.groups_core import GroupsCore
from ..groups.txn_offsets import TxnOffsetCommit
from .transactions_core import TransactionsCore


class TransactionCoordinatorService:
    def __init__(
        self, core: TransactionsCore, groups: GroupsCore, authorization: Authorization
    ) -> None:
        self.core = core
        self.groups = groups
        self.authorization = authorization

    def _caller(self, context: grpc.ServicerContext) -> Caller:
        try:
            return self.authorization.caller_of(context)
        except SeglogError as exc:
            abort(context, exc)

    @contextmanager
    def _refused(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Any seglog error of the work inside fails the call whole."""
        try:
            yield
        except SeglogError as exc:
            abort(context, exc)

    def FindCoordinator(
        self, request: pb.FindTxnCoordinatorRequest, context: grpc.ServicerContext
    ) -> pb.FindTxnCoordinatorResponse:
        caller = self._caller(context)
        with self._refused(context):
            if request.key_type == pb.TXN_KEY_GROUP:
                address = self.groups.coordinator_address(caller, request.key)
                # This gateway's own address when it is the one (a client bootstrapped from
                # several gateways must come back here, not to whichever answers next).
                address = address or str(getattr(self.groups.coordination, "address", ""))
            else:
                # Describe on the transactional id, as Kafka's FindCoordinator checks.
                self.authorization.check(
                    caller, [("Describe", "transactional_id", request.key)], "FindCoordinator"
                )
                if not request.key:
                    raise InvalidRequestError("FindCoordinator: the transactional id is empty")
                self.core.log.ensure_topic()
                address = (
                    self.core.placement.coordinator_address(request.key)
                    or self.core.placement.address
                )
            return pb.FindTxnCoordinatorResponse(address=address)

    def InitProducerId(
        self, request: pb.TxnInitProducerIdRequest, context: grpc.ServicerContext
    ) -> pb.TxnInitProducerIdResponse:
        caller = self._caller(context)
        with self._refused(context):
            grant = self.core.coordinator.init_producer_id(
                caller,
                request.transactional_id,
                request.transaction_timeout_ms,
                request.producer_id,
                request.producer_epoch,
            )
            return pb.TxnInitProducerIdResponse(
                producer_id=grant.producer_id, producer_epoch=grant.producer_epoch
            )

    def AddPartitionsToTxn(
        self, request: pb.TxnAddPartitionsRequest, context: grpc.ServicerContext
    ) -> pb.TxnAddPartitionsResponse:
        caller = self._caller(context)
        with self._refused(context):
            p = request.producer
            wanted = [(t.topic, partition) for t in request.topics for partition in t.partitions]
            errors = self.core.coordinator.add_partitions(
                caller, p.transactional_id, p.producer_id, p.producer_epoch, wanted
            )
            # None is added when one is refused: the call fails with the first refusal.
            for error in errors.values():
                if error is not None:
                    raise error
            return pb.TxnAddPartitionsResponse()

    def AddOffsetsToTxn(
        self, request: pb.TxnAddOffsetsRequest, context: grpc.ServicerContext
    ) -> pb.TxnAddOffsetsResponse:
        caller = self._caller(context)
        with self._refused(context):
            p = request.producer
            self.core.coordinator.add_offsets(
                caller, p.transactional_id, p.producer_id, p.producer_epoch, request.group_id
            )
            return pb.TxnAddOffsetsResponse()

    def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: grpc.ServicerContext
    ) -> pb.TxnOffsetCommitResponse:
        caller = self._caller(context)
        with self._refused(context):
            p = request.producer
            commit = TxnOffsetCommit(
                transactional_id=p.transactional_id,
                group_id=request.group_id,
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                offsets=tuple(
                    OffsetToCommit(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
                    for o in request.offsets
                ),
                generation=request.generation_id,
                member_id=request.member_id,
            )
            problems = self.groups.transactional.commit(caller, commit)
            response = pb.TxnOffsetCommitResponse()
            for problem in problems:
                response.errors.append(0 if problem is None else error_code_for(problem))
                response.error_messages.append("" if problem is None else str(problem))
            return response

    def EndTxn(self, request: pb.TxnEndRequest, context: grpc.ServicerContext) -> pb.TxnEndResponse:
        caller = self._caller(context)
        with self._refused(context):
            p = request.producer
            self.core.coordinator.end_txn(
                caller, p.transactional_id, p.producer_id, p.producer_epoch, request.committed
            )
            return pb.TxnEndResponse()

    def DescribeTransactions(
        self, request: pb.TxnDescribeRequest, context: grpc.ServicerContext
    ) -> pb.TxnDescribeResponse:
        caller = self._caller(context)
        with self._refused(context):
            found = self.core.queries.describe(caller, request.transactional_id)
            described = pb.TxnDescription(
                transactional_id=found.transactional_id,
                state=found.state,
                timeout_ms=found.timeout_ms,
                start_ms=found.start_ms,
                producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
            )
            by_topic: dict[str, list[int]] = {}
            for topic, partition in found.partitions:
                by_topic.setdefault(topic, []).append(partition)
            for topic, partitions in by_topic.items():
                described.partitions.add(topic=topic, partitions=partitions)
            return pb.TxnDescribeResponse(transaction=described)

    def ListTransactions(
        self, request: pb.TxnListRequest, context: grpc.ServicerContext
    ) -> pb.TxnListResponse:
        caller = self._caller(context)
        with self._refused(context):
            listed, unknown = self.core.queries.list(
                caller,
                list(request.states),
                list(request.producer_ids),
                request.min_duration_ms,
                time.time_ns() // 1_000_000,
            )
            response = pb.TxnListResponse(unknown_states=unknown)
            for t in listed:
                response.transactions.add(
                    transactional_id=t.transactional_id, producer_id=t.producer_id, state=t.state
                )
            return response

    def VerifyPartitions(
        self, request: pb.TxnVerifyRequest, context: grpc.ServicerContext
    ) -> pb.TxnVerifyResponse:
        caller = self._caller(context)
        with self._refused(context):
            # Another gateway (its certificate), or whoever may act as a broker, as Kafka's
            # AddPartitionsToTxn v4+ needs ClusterAction.
            if peer_identity(context) != GATEWAY_IDENTITY:
                self.authorization.check(caller, [("ClusterAction", *CLUSTER)], "VerifyPartitions")
            p = request.producer
            response = pb.TxnVerifyResponse()
            for t in request.topics:
                for partition in t.partitions:
                    answer = response.partitions.add(topic=t.topic, partition=partition)
                    try:
                        self.core.coordinator.verify(
                            caller,
                            p.transactional_id,
                            p.producer_id,
                            p.producer_epoch,
                            (t.topic, partition),
                        )
                    except SeglogError as exc:
                        answer.error = error_code_for(exc)
                        answer.error_message = str(exc)
            return response
