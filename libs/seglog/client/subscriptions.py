"""What a group consumer subscribes to, in kafka-python's shapes: a list of topics or a
pattern, and an optional ConsumerRebalanceListener told when partitions are taken away and
handed out.

A pattern is matched, as Kafka's Java consumer does, against the whole topic name
(`re.fullmatch`), over the cluster's topics (internal ones, `__…`, left out); the match is
taken again every `metadata_max_age_ms`, so a topic created later joins the subscription
(and the group rebalances) within that time.
"""

from __future__ import annotations

import abc
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import SeglogError
from .structs import TopicPartition

logger = logging.getLogger(__name__)


class ConsumerRebalanceListener(abc.ABC):
    """kafka-python's (and Kafka's) listener: `on_partitions_revoked` runs before a rebalance
    takes the member's partitions away (after the auto-commit), `on_partitions_assigned`
    once the new assignment is known; both on the thread calling `poll`."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


def check_listener(listener: object) -> None:
    """Any object with the two callbacks will do (a ConsumerRebalanceListener or not)."""
    missing = [
        name
        for name in ("on_partitions_revoked", "on_partitions_assigned")
        if not callable(getattr(listener, name, None))
    ]
    if missing:
        raise TypeError(
            f"listener must be a ConsumerRebalanceListener (with on_partitions_revoked and "
            f"on_partitions_assigned); {type(listener).__name__} has no {', '.join(missing)}"
        )


def notify(listener: Any, callback: str, partitions: set[TopicPartition]) -> None:
    """Call the listener; its exception is logged, not raised from poll (kafka-python's way),
    so one failing callback does not leave the consumer half rebalanced."""
    if listener is None:
        return
    try:
        getattr(listener, callback)(set(partitions))
    except Exception:
        logger.exception("the rebalance listener's %s failed", callback)


def requested_topics(topics: Iterable[str] | str) -> tuple[str, ...]:
    # A bare string is one topic, not its characters.
    names = (topics,) if isinstance(topics, str) else tuple(topics)
    for name in names:
        if not isinstance(name, str) or not name:
            raise SeglogError(f"topic names must be non-empty strings, got {name!r}")
    return tuple(sorted(set(names)))


class TopicPattern:
    def __init__(self, pattern: str | re.Pattern[str], refresh_every_ms: int) -> None:
        try:
            self.regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        except re.error as exc:
            raise SeglogError(
                f"subscribe pattern {pattern!r} is not a regular expression: {exc}"
            ) from None
        self._refresh_every_s = refresh_every_ms / 1000
        self._next_refresh_s = 0.0  # match at the first poll

    def due(self) -> bool:
        return time.monotonic() >= self._next_refresh_s

    def match(self, list_topics: Callable[[], Iterable[str]]) -> tuple[str, ...] | None:
        """The matching topics, or None when the topic list could not be read (kept as is,
        tried again at the next poll after the back-off)."""
        try:
            names = list(list_topics())
        except SeglogError as exc:
            logger.warning("listing topics for pattern %r failed: %s", self.regex.pattern, exc)
            self._next_refresh_s = time.monotonic() + min(self._refresh_every_s, 1.0)
            return None
        self._next_refresh_s = time.monotonic() + self._refresh_every_s
        return tuple(sorted(n for n in names if not n.startswith("__") and self.regex.fullmatch(n)))


class MissingTopics:
    """Says once (per change) which subscribed topics do not exist: a group member whose
    topic was deleted, or not created yet, is assigned nothing of it and was silent."""

    def __init__(self) -> None:
        self._missing: tuple[str, ...] = ()

    def check(self, describe: Callable[[list[str]], Iterable[Any]], topics: Iterable[str]) -> None:
        try:
            descriptions = describe(list(topics))
        except SeglogError as exc:
            logger.debug("describing the subscribed topics failed: %s", exc)
            return
        missing = tuple(sorted(d.name for d in descriptions if d.error))
        if missing == self._missing:
            return
        if missing:
            logger.warning(
                "subscribed topics %s do not exist (deleted, or not created yet): "
                "nothing is read from them until they are created",
                list(missing),
            )
        else:
            logger.info("subscribed topics %s exist again", list(self._missing))
        self._missing = missing
