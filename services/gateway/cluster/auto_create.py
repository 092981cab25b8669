"""Topic auto-creation, as Kafka's broker has it (`auto.create.topics.enable`, Kafka's
default true): a client that names a topic that does not exist, and allows it, gets the topic
made with `num.partitions` partitions and `default.replication.factor` replicas.

Both adapters call `TopicAutoCreation.create_missing` where their clients first name a topic:
Kafka's Metadata (v0-3 always allow it, v4+ as the request's `allow_auto_topic_creation`
says, as Kafka's KafkaApis does), and the gRPC DescribeTopics that seglog's own producer sends
for a topic it has no metadata for (its `allow_auto_topic_creation` field; `seglog topics
describe` and the consumer leave it false). Produce and Fetch never create, as in Kafka.

Per missing name, in Kafka's order (KafkaApis.handleTopicMetadataRequest and
AutoTopicCreationManager), the caller having passed the adapter's Describe check:
1. creation off, or not allowed by the client: an illegal name is INVALID_TOPIC, any other
   UNKNOWN_TOPIC_OR_PARTITION;
2. no Create on the cluster nor on the topic: PERMISSION_DENIED (TOPIC_AUTHORIZATION_FAILED);
3. an illegal name, or one too long for its partitions' directories: INVALID_TOPIC;
4. created (or created meanwhile by another caller or gateway): `None`. Kafka answers
   LEADER_NOT_AVAILABLE for a topic it has just made, which clients retry; the Kafka adapter
   does too. The answer comes once the nodes have the partitions (`start_missing`'s future:
   no thread waits for the nodes, so a Kafka Metadata holds no request handler meanwhile;
   the gRPC adapter waits on its own thread, `create_missing`), so the new topic is
   described with its leaders at once.
5. creation refused (too few live nodes for the replication factor, the cluster's partition
   limit): LEADER_NOT_AVAILABLE, the cause logged once per topic and cause, as Kafka's
   controller refuses an auto-creation without telling the client, which retries until the
   cluster can take the topic.
Names starting with `__` are the cluster's (topic_rules.is_internal_topic): never made here,
UNKNOWN_TOPIC_OR_PARTITION until the gateway makes them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from contextlib import suppress

from seglog.errors import (
    InvalidTopicError,
    LeaderNotAvailableError,
    SeglogError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.storage import log_files

from ..authorization import CLUSTER, Authorization
from ..broker.caller import Caller
from .topic_rules import is_internal_topic

logger = logging.getLogger(__name__)

# Creation failures already logged, by (topic, cause); bounded so that clients naming many
# topics that cannot be made cannot grow it: past it, the oldest half is forgotten.
_MAX_REMEMBERED_FAILURES = 1024
DEFAULT_AUTO_CREATE_TOPICS_ENABLE = True  # Kafka's default

# A topic made with the registry's num.partitions and default.replication.factor (SeglogError
# if not); the future completes once its nodes have it.
CreateTopic = Callable[[str], "Future[None]"]


class TopicAutoCreation:
    def __init__(
        self,
        exists: Callable[[str], bool],
        create: CreateTopic,
        authorization: Authorization,
        *,
        enabled: bool = DEFAULT_AUTO_CREATE_TOPICS_ENABLE,
    ) -> None:
        self._exists = exists
        self._create = create
        self._authorization = authorization
        # auto.create.topics.enable
        self.enabled = enabled
        self._logged: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()

    def create_missing(
        self, caller: Caller, names: Iterable[str], *, allowed: bool
    ) -> dict[str, SeglogError | None]:
        """`start_missing`, waited for on the calling thread."""
        return self.start_missing(caller, names, allowed=allowed).result()

    def start_missing(
        self, caller: Caller, names: Iterable[str], *, allowed: bool
    ) -> Future[dict[str, SeglogError | None]]:
        """Each of `names` that does not exist: None once made, else the error its answer
        carries (see the module's docstring); existing names are left out. The future
        completes when the nodes of every topic made have been told (at once if none was)."""
        out: dict[str, SeglogError | None] = {}
        told: list[Future[None]] = []
        for name in names:
            if self._exists(name):
                continue
            made = self._create_one(caller, name, allowed)
            if isinstance(made, Future):
                told.append(made)
                made = None
            out[name] = made
        answer: Future[dict[str, SeglogError | None]] = Future()
        left = [len(told)]

        def one_told(_: Future[None]) -> None:
            with self._lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                with suppress(InvalidStateError):  # cancelled: its asker is gone
                    answer.set_result(out)

        if not told:
            answer.set_result(out)
        for each in told:
            each.add_done_callback(one_told)
        return answer

    def _create_one(
        self, caller: Caller, name: str, allowed: bool
    ) -> SeglogError | Future[None] | None:
        """The error its answer carries, None if another made it first, or the future of
        its nodes being told."""
        if not (allowed and self.enabled) or is_internal_topic(name):
            return _missing(name)
        # Create on the cluster, else on the topic (Kafka checks the cluster's first).
        if not self._authorization.allows(caller, "Create", *CLUSTER):
            try:
                self._authorization.check(caller, [("Create", "topic", name)], "auto-creation")
            except SeglogError as exc:
                return exc
        try:
            log_files.check_topic_name(name)
        except SeglogError as exc:
            return exc
        try:
            told = self._create(name)
        except TopicAlreadyExistsError:
            return None  # another caller or gateway made it first: made all the same
        except InvalidTopicError as exc:  # legal for Kafka, too long for partition directories
            return exc
        except SeglogError as exc:
            self._log_once(name, exc)
            return LeaderNotAvailableError(f"topic {name!r} could not be created yet: {exc}")
        logger.info("auto-created topic %s for %s", name, caller.principal)
        return told

    def _log_once(self, name: str, exc: SeglogError) -> None:
        key = (name, str(exc))
        with self._lock:
            if key in self._logged:
                return
            if len(self._logged) >= _MAX_REMEMBERED_FAILURES:
                for old in list(self._logged)[: _MAX_REMEMBERED_FAILURES // 2]:
                    del self._logged[old]
            self._logged[key] = None
        logger.warning("auto-creation of topic %s refused: %s", name, exc)


def _missing(name: str) -> SeglogError:
    """What a name that is not created answers: INVALID_TOPIC when it is illegal."""
    try:
        log_files.check_topic_name(name)
    except SeglogError as exc:
        return exc
    return UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
