"""The fault campaign: a real cluster (a gateway and three storage nodes, each a process;
RF 3, min ISR 2; or two gateways sharing a registry in etcd), real client processes
recording their histories (tests/faults/workload.py), a seeded random schedule of faults
(tests/faults/fault_kinds.py), then healing, a final read of every partition, and the
checker's verdict (tests/faults/checker.py) on the histories; and once every replica has
caught up, the replicas' own files compared batch by batch (tests/faults/replica_logs.py):
replicas that went through two histories are a failure even when no client saw it.

    python -m tests.fault_campaign --cycles 40 --seed 7 --faults node-kill,drop-answers \
        --producer idempotent [--etcd] [--keep] [--share-members 3] \
        [--workload records|transactions|streams] [--tiered]
    make fault-campaign CYCLES=40 SEED=7 FAULTS=node-kill,drop-answers PRODUCER=acks1 ETCD=1 SHARE=3
    make fault-campaign WORKLOAD=transactions CYCLES=100
    make fault-campaign WORKLOAD=streams CYCLES=30
    make fault-campaign TIERED=1 CYCLES=30

The records workload (the default) is seglog's own clients sending unique records; the
transactions workload (tests/faults/txn_campaign.py) is librdkafka's transactional producers
and read_committed/read_uncommitted readers on the Kafka port, judged for Jepsen's
transactional anomalies (tests/faults/txn_checker.py). The streams workload
(tests/faults/streams_campaign.py) is Kafka Streams' exactly_once_v2 word count, two instances
of two threads, judged for exact counts (tests/faults/streams_checker.py). With share
members, a share group also reads the topic as a queue and is judged on its own
(tests/faults/share_campaign.py, share_checker.py). With `--tiered`, a real object store
(SeaweedFS) runs beside the cluster, a second topic is tiered to it under the same faults
plus the store's own (killed, slow, answering 503: tests/faults/store_faults.py), and its
histories are judged apart, the final read going from offset 0 through the store's segments
(tests/faults/tiered_campaign.py).

Each cycle waits for the cluster to heal (every ISR whole, writes going on), then injects
one fault, sometimes two that harm different things (a node, the gateways and etcd, the
clients' link, the clients themselves: at most one storage node at a time, which is what
RF 3 with min ISR 2 promises to survive), and heals them. Network faults need root and
tests/faults/netns.py; answer faults tests/faults/proxy.py; power cuts and full disks root
and loop mounts (each node's data dir is then an ext4 of its own, tests/faults/disks.py);
without them the campaign runs the faults it can make (`available_faults`).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults import streams_campaign, tiered_campaign, txn_campaign
from tests.faults.campaign_ends import (
    FINAL_READ_TIMEOUT_S,
    final_read,
    keep_replicas,
    note_timeout,
    settle,
)
from tests.faults.catalog import (
    ALL_FAULTS,
    DISK_FAULTS,
    ETCD_FAULTS,
    MOUNTED_DISK_FAULTS,
    NETWORK_FAULTS,
    PROXY_FAULTS,
    STORE_FAULTS,
    available_faults,
)
from tests.faults.checker import Guarantees, Verdict, check
from tests.faults.clients import Clients
from tests.faults.cluster import HEAL_TIMEOUT_S, PARTITIONS, TOPIC, Cluster
from tests.faults.fault_kinds import NODE, PRODUCER_REQUEST_TIMEOUT_MS, Fault
from tests.faults.history import read_history
from tests.faults.replica_logs import diverged_partitions
from tests.faults.share_campaign import ShareMembers
from tests.faults.share_checker import ShareVerdict
from tests.faults.streams_checker import StreamsVerdict, check_streams
from tests.faults.tiered_campaign import TieredStore, TieredWorkload
from tests.faults.txn_checker import TxnVerdict, check_transactions
from tests.waiting import wait_for

GROUP = "campaign-readers"
DISK_FAULT_SEGMENT_BYTES = 256 * 1024
WORKLOADS = ("records", "transactions", "streams")


# -- the campaign ---------------------------------------------------------------------------


@dataclass
class CampaignConfig:
    cycles: int = 40
    seed: int = 0
    faults: Sequence[str] = ()  # empty: every available fault
    producer_mode: str = "idempotent"
    producers: int = 2
    consumers: int = 2
    producer_interval_ms: float = 2.0
    overlap_probability: float = 0.3
    etcd: bool = False  # two gateways sharing a registry in etcd, instead of one gateway
    # The network lab's names and subnet: two campaigns on one machine need different ones.
    network_prefix: str = "sgcamp"
    # Faults the first cycles inject, one each, before the random schedule takes over.
    opening: Sequence[str] = ()
    subnet_octet: int = 231
    share_members: int = 0  # share group members reading the topic as a queue (share_campaign)
    # or "transactions" (tests/faults/txn_campaign.py), "streams" (streams_campaign.py)
    workload: str = "records"
    tiered: bool = False  # an object store and a tiered topic beside (tiered_campaign.py)

    @property
    def transactional(self) -> bool:
        """Transactional clients on the Kafka port: the gateways set for transactions."""
        return self.workload in ("transactions", "streams")


@dataclass
class CampaignReport:
    config: CampaignConfig
    cycles: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    schedule: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the cluster not healing, stalls
    final_read_complete: bool = False
    verdict: Verdict | TxnVerdict | StreamsVerdict | None = None
    share_verdict: ShareVerdict | None = None  # with share members
    tiered_verdict: Verdict | None = None  # the tiered topic's histories, with --tiered
    tiered_states: str = ""  # its partitions' local starts and remote ends at the end

    @property
    def ok(self) -> bool:
        """The checker's verdict, given a final read to judge against (and the share
        checker's, with share members; the tiered topic's, with a tiered topic)."""
        share_ok = self.share_verdict is None or self.share_verdict.ok
        tiered = self.tiered_verdict
        tiered_ok = tiered.ok if tiered is not None else not self.config.tiered
        return (
            self.verdict is not None
            and self.verdict.ok
            and self.final_read_complete
            and share_ok
            and tiered_ok
        )

    @property
    def passed(self) -> bool:
        """A valid history from a cluster that also healed after every cycle: a follower
        that stops copying, or writes that do not resume once the faults are healed, lose
        nothing the checker can see, but they are failures all the same."""
        return self.ok and not self.problems

    def summary(self) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        gateways = "two gateways on etcd" if self.config.etcd else "one gateway"
        clients = (
            self.config.workload
            if self.config.transactional
            else f"producer {self.config.producer_mode}"
        )
        lines = [
            f"fault campaign: {self.cycles} cycles, seed {self.config.seed}, {clients}, "
            f"{gateways}; faults: {faults}",
        ]
        if self.verdict is not None:
            lines.append(f"checker: {self.verdict.summary()}")
        if self.share_verdict is not None:
            lines.append(f"share checker: {self.share_verdict.summary()}")
        if self.tiered_verdict is not None:
            lines.append(f"tiered topic checker: {self.tiered_verdict.summary()}")
            lines.append(f"tiered topic at the end: {self.tiered_states}")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def run(root: Path, config: CampaignConfig, log: Callable[[str], None] = print) -> CampaignReport:
    if config.workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {WORKLOADS}, not {config.workload!r}")
    names = list(config.faults) or available_faults(config.etcd, config.tiered)
    unknown = [n for n in [*names, *config.opening] if n not in ALL_FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; known: {sorted(ALL_FAULTS)}")
    if not config.etcd and any(n in ETCD_FAULTS for n in names):
        raise ValueError("etcd faults need a cluster with etcd (--etcd)")
    if not config.tiered and any(n in STORE_FAULTS for n in names):
        raise ValueError("object-store faults need a tiered topic (--tiered)")
    rng = random.Random(config.seed)
    report = CampaignReport(config)
    history_dir = root / "history"
    lab = _open_lab(config) if any(n in NETWORK_FAULTS for n in names) else None
    cluster: Cluster | None = None
    clients: Clients | streams_campaign.StreamsClients | None = None
    share: ShareMembers | None = None
    store: TieredStore | None = None
    tiered: TieredWorkload | None = None
    try:
        if config.tiered:
            (root / "logs").mkdir(parents=True, exist_ok=True)
            store = TieredStore(root, lab.bridge_ip if lab is not None else "127.0.0.1")
        cluster = Cluster(
            root,
            lab,
            use_proxy=any(n in PROXY_FAULTS for n in names),
            etcd=config.etcd,
            node_disks=any(n in MOUNTED_DISK_FAULTS for n in names),
            kafka_proxy=config.transactional and any(n in PROXY_FAULTS for n in names),
            gateway_args=[
                *(txn_campaign.GATEWAY_ARGS if config.transactional else ()),
                *(tiered_campaign.GATEWAY_ARGS if store is not None else ()),
            ],
            node_args=store.node_args() if store is not None else (),
            node_env=store.node_env() if store is not None else None,
        )
        cluster.store = store
        # Disk faults damage older segments too: small segments make many of them.
        topic_configs = {"segment.bytes": str(DISK_FAULT_SEGMENT_BYTES)}
        disk_faults = any(n in DISK_FAULTS for n in names)
        cluster.admin.create_topic(TOPIC, PARTITIONS, 3, topic_configs if disk_faults else None)
        if store is not None:
            tiered = TieredWorkload(root, cluster, store, history_dir, config.producer_mode)
            tiered.create_topic()
        wait_for(cluster.healed, HEAL_TIMEOUT_S, "the topic's replicas")
        common = ["--topic", TOPIC, "--history-dir", str(history_dir)]
        clients = (
            streams_campaign.clients(root, cluster, history_dir)
            if config.workload == "streams"
            else txn_campaign.clients(root, cluster, history_dir)
            if config.transactional
            else Clients(
                root,
                producer_args=[
                    *common,
                    "--bootstrap",
                    cluster.client_address,
                    "--mode",
                    config.producer_mode,
                    "--interval-ms",
                    str(config.producer_interval_ms),
                    "--request-timeout-ms",
                    str(PRODUCER_REQUEST_TIMEOUT_MS),
                ],
                consumer_args=[*common, "--bootstrap", cluster.client_address, "--group", GROUP],
            )
        )
        cluster.clients = clients
        for _ in range(config.producers):
            clients.start("producer")
        for _ in range(config.consumers):
            clients.start("consumer")
        if config.share_members:
            (described,) = cluster.admin.describe_topics([TOPIC])
            share = ShareMembers(
                root, history_dir, cluster.kafka_addresses[0], TOPIC, described.topic_id
            )
            share.start(config.share_members)
        if tiered is not None:
            tiered.start()
        for cycle in range(config.cycles):
            opening = config.opening[cycle] if cycle < len(config.opening) else None
            _one_cycle(cluster, names, rng, report, log, config.overlap_probability, opening)
            if tiered is not None:
                tiered.after_cycle(cycle + 1, report.schedule, log)
        settle(cluster, report)
        if tiered is not None:  # copies going on after the faults, then no more writes
            report.problems += tiered.stop_writing()
        clients.stop_producers()
        if share is not None:
            if not share.settle():
                report.problems.append("the share members did not finish every acknowledged send")
            share.stop()
            report.share_verdict = share.verdict()
        if note_timeout(report, cluster.caught_up, "every replica to catch up"):
            diverged = diverged_partitions(cluster.root, TOPIC, PARTITIONS, sorted(cluster.nodes))
            if diverged:
                keep_replicas(cluster, root / "diverged")
            report.problems += diverged
        if isinstance(clients, streams_campaign.StreamsClients):
            # Read while the instances run: the output catches up with the input first.
            clients.stop_readers()
            reader = streams_campaign.final_reader(cluster, root, history_dir)
            report.final_read_complete = reader.wait(2 * streams_campaign.CATCH_UP_S + 30) == 0
            if not report.final_read_complete:
                report.problems.append("the streams output did not catch up with the input")
            clients.stop_all()
        else:
            clients.stop_all()
            final_read(root, cluster, config.transactional, report, history_dir)
        if tiered is not None:
            report.problems += tiered.final_read(FINAL_READ_TIMEOUT_S)
            report.tiered_states = tiered.final_states
    finally:
        if share is not None:
            share.stop()
        if clients is not None:
            clients.stop_all()
        if tiered is not None:
            tiered.stop_all()
        if cluster is not None:
            cluster.close()
        if store is not None:
            store.close()
        if lab is not None:
            lab.close()
    if tiered is not None:
        mode = Guarantees.for_producer_mode(config.producer_mode)
        report.tiered_verdict = check(read_history(tiered.history_dir), mode)
    if config.workload == "streams":
        report.verdict = check_streams(read_history(history_dir))
    elif config.transactional:
        report.verdict = check_transactions(read_history(history_dir))
    else:
        mode = Guarantees.for_producer_mode(config.producer_mode)
        report.verdict = check(read_history(history_dir), mode)
    return report


def _open_lab(config: CampaignConfig) -> Any:
    from tests.faults.netns import NetworkLab

    return NetworkLab(config.network_prefix, config.subnet_octet)


def _one_cycle(
    cluster: Cluster,
    names: list[str],
    rng: random.Random,
    report: CampaignReport,
    log: Callable[[str], None],
    overlap_probability: float,
    opening: str | None = None,
) -> None:
    settle(cluster, report)
    chosen = [ALL_FAULTS[opening or rng.choice(names)]()]
    others = [n for n in names if ALL_FAULTS[n]().target != chosen[0].target]
    if others and rng.random() < overlap_probability:
        chosen.append(ALL_FAULTS[rng.choice(others)]())
    # A node fault first: noticing a node down needs the gateway up.
    chosen.sort(key=lambda fault: fault.target != NODE)
    started: list[Fault] = []
    try:
        for fault in chosen:
            started.append(fault)  # healed even when its start failed half way
            what = fault.start(cluster, rng)
            report.faults[fault.name] += 1
            report.schedule.append(f"cycle {report.cycles + 1}: {what}")
            log(f"cycle {report.cycles + 1}: {what}")
    except Exception as exc:  # a fault that could not be made is a finding
        report.problems.append(f"cycle {report.cycles + 1}: {type(exc).__name__}: {exc}")
    finally:
        for fault in reversed(started):
            try:
                fault.heal(cluster)
            except Exception as exc:  # written down; the next cycle waits to heal
                report.problems.append(
                    f"cycle {report.cycles + 1}: healing {fault.name}: {type(exc).__name__}: {exc}"
                )
    report.cycles += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_campaign")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--faults", default="", help=f"comma-separated, of {', '.join(ALL_FAULTS)}; default all"
    )
    parser.add_argument(
        "--producer", choices=("idempotent", "plain", "acks1"), default="idempotent"
    )
    parser.add_argument("--workload", choices=WORKLOADS, default="records")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--share-members", type=int, default=0, help="share group members")
    parser.add_argument(
        "--etcd", action="store_true", help="two gateways sharing a registry in etcd"
    )
    parser.add_argument(
        "--tiered", action="store_true", help="an object store and a tiered topic beside"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep data, logs and histories of a valid run too"
    )
    parser.add_argument(
        "--network-prefix", default="sgcamp", help="the network lab's names (one lab a prefix)"
    )
    parser.add_argument("--subnet-octet", type=int, default=231, help="the lab's 10.<octet>.0.0/24")
    args = parser.parse_args(argv)
    config = CampaignConfig(
        cycles=args.cycles,
        seed=args.seed,
        faults=[f for f in args.faults.split(",") if f],
        producer_mode=args.producer,
        producers=args.producers,
        consumers=args.consumers,
        share_members=args.share_members,
        etcd=args.etcd,
        network_prefix=args.network_prefix,
        subnet_octet=args.subnet_octet,
        workload=args.workload,
        tiered=args.tiered,
    )
    root = Path(tempfile.mkdtemp(prefix="seglog-campaign-"))
    print(f"fault campaign: seed {config.seed}, data, logs and histories in {root}", flush=True)
    report = run(root, config, log=lambda line: print(line, flush=True))
    print(report.summary())
    for verdict in (report.verdict, report.tiered_verdict):
        for line in verdict.details() if verdict is not None else ():
            print(line)
    if report.passed and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
