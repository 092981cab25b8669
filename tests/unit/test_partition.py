"""One partition's replica on a storage node (services/storage_node/partition.py), as
Kafka's PartitionTest pins its own: a real log on disk, registrations from the registry
applied directly, follower fetches recorded by hand; no servers, no fetcher threads."""

from __future__ import annotations

import pytest

from seglog.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownLeaderEpochError,
)
from seglog.storage import Log, LogConfig
from services.storage_node.partition import (
    IsrProposal,
    Partition,
    Registration,
    now_ms,
)
from tests.batches import make_batch

LOCAL = 1
LAG_TIME_MAX_MS = 30_000


@pytest.fixture
def open_logs():
    logs: list[Log] = []
    yield logs
    for log in logs:
        log.close()


@pytest.fixture
def replica(tmp_path, open_logs):
    """A fresh replica on node 1 whose log accepts a single in-sync replica."""
    return _replica(tmp_path, open_logs, min_insync_replicas=1)


def _replica(tmp_path, open_logs, *, min_insync_replicas: int) -> Partition:
    log = Log.open(tmp_path / "t-0", LogConfig(min_insync_replicas=min_insync_replicas))
    open_logs.append(log)
    return Partition("t", 0, log, LOCAL)


def lead(partition, *, isr=(1, 2, 3), replicas=(1, 2, 3), leader_epoch=3, partition_epoch=4):
    partition.apply(Registration(LOCAL, leader_epoch, partition_epoch, replicas, isr))


def append(partition: Partition, count: int) -> None:
    values = [b"v%d" % i for i in range(count)]
    partition.log.append(make_batch(values), leader_epoch=partition.leader_epoch)


# -- role and epochs ---------------------------------------------------------------------


def test_a_newer_registration_is_taken_and_an_older_or_equal_one_is_ignored(replica):
    assert replica.apply(Registration(2, 3, 4, (1, 2), (1, 2)))  # first: a new term
    assert not replica.apply(Registration(2, 3, 4, (1, 2), (1, 2)))
    assert not replica.apply(Registration(LOCAL, 2, 9, (1, 2), (1, 2)))  # older leader epoch
    assert replica.registration == Registration(2, 3, 4, (1, 2), (1, 2))
    assert not replica.is_leader


def test_only_a_leader_epoch_change_starts_a_new_term(replica):
    lead(replica, isr=(1, 2, 3))
    # The ISR shrinks: a newer partition epoch, same leader epoch, same term.
    assert not replica.apply(Registration(LOCAL, 3, 5, (1, 2, 3), (1, 2)))
    assert replica.isr == (1, 2)
    assert replica.apply(Registration(2, 4, 6, (1, 2, 3), (1, 2)))
    assert not replica.is_leader


def test_a_new_leader_starts_its_epoch_at_its_log_end_offset(replica):
    replica.apply(Registration(2, 3, 4, (1, 2), (1, 2)))
    replica.log.append(make_batch([b"a", b"b", b"c"]), leader_epoch=3)
    lead(replica, leader_epoch=4, partition_epoch=5)
    assert replica.log.leader_epochs.start_offset_of(4) == 3
    assert set(replica.followers) == {2, 3}  # its followers, never itself


def test_a_replica_that_becomes_a_follower_forgets_its_followers_state(replica):
    lead(replica)
    replica.record_follower_fetch(2, 0, 0)
    replica.apply(Registration(2, 4, 5, (1, 2, 3), (1, 2, 3)))
    assert replica.followers == {}
    assert replica.record_follower_fetch(3, 0, 0) is None  # a follower serves no follower


def test_requests_naming_an_older_epoch_are_fenced_and_a_newer_one_is_unknown(replica):
    lead(replica, leader_epoch=3)
    replica.check_leader_epoch(3)
    replica.check_leader_epoch(-1)  # any epoch
    with pytest.raises(FencedLeaderEpochError):
        replica.check_leader_epoch(2)
    with pytest.raises(UnknownLeaderEpochError):
        replica.check_leader_epoch(4)


def test_only_the_current_leader_at_the_clients_epoch_takes_produce(replica):
    with pytest.raises(NotLeaderError):
        replica.require_leader(-1)  # no registration yet
    lead(replica, leader_epoch=3)
    replica.require_leader(-1)
    replica.require_leader(3)
    with pytest.raises(NotLeaderError):
        replica.require_leader(2)
    replica.apply(Registration(2, 4, 5, (1, 2, 3), (1, 2, 3)))
    with pytest.raises(NotLeaderError):
        replica.require_leader(-1)


def test_acks_all_refuses_before_writing_when_the_isr_is_below_min_insync(tmp_path, open_logs):
    replica = _replica(tmp_path, open_logs, min_insync_replicas=2)
    lead(replica, isr=(1,))
    with pytest.raises(NotEnoughReplicasError):
        replica.check_enough_replicas()
    assert not replica.enough_replicas_after_append()
    replica.apply(Registration(LOCAL, 3, 5, (1, 2, 3), (1, 3)))
    replica.check_enough_replicas()


# -- the high watermark ------------------------------------------------------------------


def test_the_high_watermark_is_the_lowest_log_end_offset_over_the_isr(replica):
    lead(replica, isr=(1, 2, 3))
    append(replica, 10)
    replica.record_follower_fetch(2, 10, 0)
    assert replica.log.high_watermark == 0  # follower 3 not heard from in this term
    replica.record_follower_fetch(3, 6, 0)
    assert replica.log.high_watermark == 6
    replica.record_follower_fetch(3, 10, 0)
    assert replica.log.high_watermark == 10


def test_the_high_watermark_ignores_followers_outside_the_isr(replica):
    lead(replica, isr=(1, 2))
    append(replica, 10)
    replica.record_follower_fetch(2, 10, 0)
    assert replica.log.high_watermark == 10


def test_the_high_watermark_never_moves_back(replica):
    lead(replica, isr=(1, 2))
    append(replica, 10)
    replica.record_follower_fetch(2, 8, 0)
    replica.record_follower_fetch(2, 4, 0)  # a follower that truncated
    assert replica.log.high_watermark == 8


def test_the_high_watermark_stays_put_while_the_isr_is_below_min_insync(tmp_path, open_logs):
    replica = _replica(tmp_path, open_logs, min_insync_replicas=2)
    lead(replica, isr=(1,))
    append(replica, 10)
    assert not replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 0
    # A single replica partition needs only itself: min(min.insync.replicas, replicas).
    single = Partition("t", 1, Log.open(tmp_path / "t-1", replica.log.config), LOCAL)
    open_logs.append(single.log)
    single.apply(Registration(LOCAL, 0, 0, (1,), (1,)))
    single.log.append(make_batch([b"a"]), leader_epoch=0)
    assert single.maybe_increment_high_watermark()
    assert single.log.high_watermark == 1


def test_a_fenced_leader_neither_moves_its_high_watermark_nor_serves_as_leader(replica):
    lead(replica, isr=(1, 2))
    append(replica, 10)
    replica.fenced = "heartbeats unanswered"
    replica.record_follower_fetch(2, 10, 0)
    assert replica.log.high_watermark == 0
    with pytest.raises(NotLeaderError, match="fenced"):
        replica.require_leader(-1)


# -- ISR expansion -----------------------------------------------------------------------


def test_a_follower_that_reaches_the_high_watermark_is_proposed_for_the_isr(replica):
    lead(replica, isr=(1,), leader_epoch=3, partition_epoch=4)
    append(replica, 10)
    assert replica.maybe_increment_high_watermark()
    assert replica.log.high_watermark == 10  # the leader alone is the ISR
    assert replica.record_follower_fetch(2, 9, 0) is None
    proposal = replica.record_follower_fetch(2, 10, 0)
    assert proposal == IsrProposal("t", 0, 3, 4, (1, 2))
    assert replica.pending_isr == (1, 2)
    assert replica.maximal_isr == (1, 2)


def test_one_isr_proposal_at_a_time_until_the_registry_answers(replica):
    lead(replica, isr=(1,))
    assert replica.record_follower_fetch(2, 0, 0) is not None
    assert replica.record_follower_fetch(3, 0, 0) is None  # one in flight
    replica.proposal_failed()
    assert replica.record_follower_fetch(3, 0, 0) == IsrProposal("t", 0, 3, 4, (1, 3))


def test_the_high_watermark_counts_a_pending_isr_addition(replica):
    # KIP-497: the maximal ISR; the leader must not commit past what the joining follower has.
    lead(replica, isr=(1,))
    append(replica, 10)
    replica.record_follower_fetch(2, 10, 0)
    append(replica, 5)
    replica.record_follower_fetch(2, 12, 0)
    assert replica.log.high_watermark == 12


def test_a_follower_must_reach_the_start_of_the_leaders_epoch_to_join_the_isr(replica):
    lead(replica, isr=(1, 2), leader_epoch=3, partition_epoch=4)
    append(replica, 10)
    lead(replica, isr=(1, 2), leader_epoch=4, partition_epoch=5)  # epoch 4 starts at 10
    assert replica.log.high_watermark == 0  # follower 2 not heard from in this term
    # At the high watermark but short of the epoch's start: records it may lack.
    assert replica.record_follower_fetch(3, 5, 0) is None
    assert replica.record_follower_fetch(3, 10, 0) == IsrProposal("t", 0, 4, 5, (1, 2, 3))


def test_a_fenced_leader_proposes_no_isr_change(replica):
    lead(replica, isr=(1,))
    replica.fenced = "heartbeats unanswered"
    assert replica.record_follower_fetch(2, 0, 0) is None
    assert replica.shrink_proposal(LAG_TIME_MAX_MS) is None


# -- ISR shrink --------------------------------------------------------------------------


def test_a_follower_not_caught_up_within_the_lag_time_is_proposed_out_of_the_isr(replica):
    lead(replica, isr=(1, 2, 3))
    append(replica, 10)
    replica.record_follower_fetch(2, 5, 0)
    replica.record_follower_fetch(3, 5, 0)
    assert replica.shrink_proposal(LAG_TIME_MAX_MS) is None  # caught up when the term began
    replica.followers[2].last_caught_up_time_ms = now_ms() - LAG_TIME_MAX_MS - 1_000
    assert replica.shrink_proposal(LAG_TIME_MAX_MS) == IsrProposal("t", 0, 3, 4, (1, 3))
    assert replica.pending_isr == (1, 3)


def test_a_follower_at_the_leaders_log_end_is_never_out_of_sync(replica):
    # An idle partition: nothing new to fetch for longer than the lag time is not lagging.
    lead(replica, isr=(1, 2))
    append(replica, 10)
    replica.record_follower_fetch(2, 10, 0)
    replica.followers[2].last_caught_up_time_ms = now_ms() - LAG_TIME_MAX_MS - 1_000
    assert replica.shrink_proposal(LAG_TIME_MAX_MS) is None


def test_a_fetch_that_reaches_the_previous_fetchs_log_end_counts_as_caught_up_then(replica):
    # Kafka's rule: a follower always behind a busy leader is still in sync if each fetch
    # reaches where the leader was at the previous one.
    lead(replica, isr=(1,))
    append(replica, 10)
    replica.record_follower_fetch(2, 0, 0)  # the leader was at 10
    state = replica.followers[2]
    first_fetch_time_ms = state.last_fetch_time_ms
    assert state.last_caught_up_time_ms == 0  # never caught up yet
    append(replica, 5)
    replica.proposal_failed()
    replica.record_follower_fetch(2, 10, 0)  # behind the leader (15), but reached 10
    assert state.last_caught_up_time_ms == first_fetch_time_ms


def test_the_leaders_view_of_each_replicas_log_end_offset(replica):
    lead(replica, isr=(1, 2, 3))
    append(replica, 4)
    replica.record_follower_fetch(2, 3, 0)
    assert replica.replica_log_end_offsets() == {1: 4, 2: 3, 3: -1}
