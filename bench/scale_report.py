"""How the scale group prints: each figure beside the issue's target, OK or MISS, and the
cost curve as a table whose slope shows."""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1024 * 1024
ETCD_VALUE_LIMIT_BYTES = 256 * 1024

# The targets.
CREATE_TARGET_S = 60.0  # 10,000 partitions with every ISR full
NODE_IDLE_CPU_TARGET_S = 0.3  # per 10 s
GATEWAY_IDLE_CPU_TARGET_S = 0.1
DESCRIPTORS_PER_REPLICA_TARGET = 1.5
PRODUCE_LATENCY_RATIO_TARGET = 1.5
PRODUCE_P99_RATIO_TARGET = 1.5
CONTROLLED_SHUTDOWN_TARGET_S = 5.0
BYTES_PER_CHANGE_RATIO_TARGET = 1.5  # "independent of the partition count"


@dataclass
class StepRow:
    partitions: int
    reached: bool
    create_s: float
    seen: str = ""
    node_cpu_s: dict[str, float] = field(default_factory=dict)
    gateway_cpu_s: float = 0.0
    node_rss_bytes: int = 0
    gateway_rss_bytes: int = 0
    node_descriptors: int = 0
    produce_ms: float = 0.0
    fenced: dict[int, float] = field(default_factory=dict)
    leader_changes: int = 0


@dataclass
class BackendResult:
    backend: str
    baseline: StepRow | None = None
    climb: list[StepRow] = field(default_factory=list)
    one_topic: StepRow | None = None
    steady_p99_ms: tuple[float, float] | None = None  # (idle, while creating)
    steady_samples: tuple[int, int] = (0, 0)  # the records behind each
    steady_moves: str = ""  # p50 and p90, idle -> while creating
    registry_bytes: dict[int, int] = field(default_factory=dict)  # partitions -> bytes
    largest_etcd_value_bytes: int | None = None
    controlled_shutdown_s: tuple[int, float | None] | None = None  # (led, seconds)
    kill_failover_s: tuple[int, float | None] | None = None
    session_timeout_ms: int = 0


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISS"


def line(text: str, target: str = "", ok: bool | None = None) -> None:
    suffix = "" if ok is None else f"  target {target}  {verdict(ok)}"
    print(f"  {text}{suffix}", flush=True)


def print_step(label: str, row: StepRow, baseline: StepRow | None, hosted_replicas: int) -> None:
    """The baseline (no `baseline` given) is printed without targets: it is the reference."""

    def judged(text: str, target: str, ok: bool) -> None:
        line(text, target, ok if baseline is not None else None)

    if not row.reached:
        line(f"{label}: did not reach {row.partitions:,} partitions in {row.create_s:.1f} s")
        line(f"  saw: {row.seen}")
    else:
        line(f"{label}: {row.partitions:,} partitions, every ISR full in {row.create_s:.1f} s")
        if row.seen:
            line(f"  but: {row.seen}")
    fenced = ", ".join(f"node {n} at {t:.1f} s" for n, t in sorted(row.fenced.items()))
    judged(f"  nodes fenced while creating: {fenced or 'none'}", "none", not row.fenced)
    judged(f"  leaders changed: {row.leader_changes}", "0", row.leader_changes == 0)
    if not row.node_cpu_s:
        return
    each = ", ".join(f"{name} {s:.2f}" for name, s in sorted(row.node_cpu_s.items()))
    worst = max(row.node_cpu_s.values())
    judged(
        f"  idle CPU per 10 s, nodes: {each}",
        f"<= {NODE_IDLE_CPU_TARGET_S}",
        worst <= NODE_IDLE_CPU_TARGET_S,
    )
    judged(
        f"  idle CPU per 10 s, gateway: {row.gateway_cpu_s:.2f}",
        f"<= {GATEWAY_IDLE_CPU_TARGET_S}",
        row.gateway_cpu_s <= GATEWAY_IDLE_CPU_TARGET_S,
    )
    line(
        f"  RSS: node (largest) {row.node_rss_bytes / MIB:.0f} MiB, "
        f"gateway {row.gateway_rss_bytes / MIB:.0f} MiB"
    )
    per_replica = row.node_descriptors / max(1, hosted_replicas)
    judged(
        f"  descriptors: node (most) {row.node_descriptors:,}, "
        f"{per_replica:.2f} per hosted replica",
        f"<= {DESCRIPTORS_PER_REPLICA_TARGET}",
        per_replica <= DESCRIPTORS_PER_REPLICA_TARGET,
    )
    if baseline is not None and baseline is not row:
        ratio = row.produce_ms / baseline.produce_ms
        line(
            f"  acks=all produce {row.produce_ms:.1f} ms, {ratio:.2f}x "
            f"the {baseline.produce_ms:.1f} ms "
            f"at {baseline.partitions} partitions",
            f"<= {PRODUCE_LATENCY_RATIO_TARGET}x",
            ratio <= PRODUCE_LATENCY_RATIO_TARGET,
        )
    else:
        line(f"  acks=all produce {row.produce_ms:.1f} ms (the baseline)")


def print_curve(result: BackendResult) -> None:
    rows = [r for r in (result.baseline, *result.climb) if r is not None and r.node_cpu_s]
    if result.one_topic is not None and result.one_topic.node_cpu_s:
        rows.append(result.one_topic)
    print(f"[{result.backend}] the cost curve (idle: CPU s per 10 s; RSS MiB)", flush=True)
    print(
        f"  {'partitions':>12s} {'create s':>9s} {'node CPU':>9s} {'gw CPU':>7s} {'node RSS':>9s} "
        f"{'gw RSS':>7s} {'node fds':>9s} {'produce ms':>11s} {'ratio':>6s}"
    )
    base = result.baseline
    for row in rows:
        name = f"{row.partitions:,}" + (" (1 topic)" if row is result.one_topic else "")
        ratio = row.produce_ms / base.produce_ms if base is not None else float("nan")
        print(
            f"  {name:>12s} {row.create_s:9.1f} {max(row.node_cpu_s.values()):9.2f} "
            f"{row.gateway_cpu_s:7.2f} {row.node_rss_bytes / MIB:9.0f} "
            f"{row.gateway_rss_bytes / MIB:7.0f} {row.node_descriptors:9,d} "
            f"{row.produce_ms:11.1f} {ratio:6.2f}"
        )
    reached = [r for r in result.climb if r.reached]
    if result.climb:
        total = sum(r.create_s for r in result.climb if r.reached)
        top = reached[-1].partitions if reached else 0
        line(
            f"topics of the climb: {top:,} partitions with every ISR full in {total:.1f} s in all",
            f"{result.climb[-1].partitions:,} <= {CREATE_TARGET_S:.0f} s",
            len(reached) == len(result.climb) and total <= CREATE_TARGET_S,
        )
