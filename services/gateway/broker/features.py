"""The cluster's feature versions as Kafka 4.3 names them (KIP-584: ApiVersions' supported and
finalized features, DescribeFeatures through it, UpdateFeatures), fixed by what this seglog
release implements rather than negotiated: there is no KRaft quorum to finalize them in.

What seglog says, and why (Kafka 4.3.1 answers metadata.version 7..30 finalized 30, and
transaction/group/share/streams at their latest):

    metadata.version                  7..30 (3.3-IV3..4.3-IV0), finalized 30: the Kafka
                                      protocol seglog speaks is 4.3's, API by API as
                                      ApiVersions lists them; nothing in seglog is gated on an
                                      older level
    eligible.leader.replicas.version  0..1, finalized 1: KIP-966's ELR is kept by the
                                      registry (partition_changes.py)
    kraft.version                     0..0: no KRaft quorum (the registry is a file or etcd)
    transaction.version               0..0: no transactions yet (so a Java producer never
                                      takes KIP-890's TV2 path)
    group.version                     0..1, finalized 1: KIP-848 consumer groups
                                      (ConsumerGroupHeartbeat, ConsumerGroupDescribe), as
                                      Kafka 4.x's GV_1
    share.version                     0..1, finalized 1: share groups (KIP-932), whose
                                      APIs Kafka advertises only at share.version 1
    streams.version                   0..0: no streams groups (KIP-1071)

A feature finalized at 0 is not listed among the finalized ones, as Kafka leaves it out. The
finalized features' epoch is the registry's metadata offset, as a KRaft broker answers its
image's offset: it only grows, so a client keeping the newest answer keeps a right one.
"""

from __future__ import annotations

from dataclasses import dataclass

from seglog.errors import InvalidUpdateVersionError

METADATA_VERSION = "metadata.version"


@dataclass(frozen=True)
class Feature:
    name: str
    min_version: int
    max_version: int
    finalized: int  # 0: not finalized (not listed)


FEATURES: tuple[Feature, ...] = (
    Feature("eligible.leader.replicas.version", 0, 1, 1),
    Feature("group.version", 0, 1, 1),
    Feature("kraft.version", 0, 0, 0),
    # 3.3-IV3 is Kafka 4.x's oldest metadata.version; 4.3-IV0 is Kafka 4.3.1's latest (30).
    Feature(METADATA_VERSION, 7, 30, 30),
    Feature("share.version", 0, 1, 1),
    Feature("streams.version", 0, 0, 0),
    Feature("transaction.version", 0, 0, 0),
)
_BY_NAME = {feature.name: feature for feature in FEATURES}


def finalized() -> list[Feature]:
    return [feature for feature in FEATURES if feature.finalized > 0]


def check_update(name: str, level: int) -> None:
    """An UpdateFeatures change is accepted only where it changes nothing: seglog's levels
    are its release's. InvalidUpdateVersionError naming the feature's level otherwise."""
    feature = _BY_NAME.get(name)
    if feature is None:
        raise InvalidUpdateVersionError(f"unknown feature {name!r}")
    if level != feature.finalized:
        raise InvalidUpdateVersionError(
            f"{name} is {feature.finalized} in this seglog release and cannot be changed "
            f"(asked for {level})"
        )
