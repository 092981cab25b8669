"""The gateway's gRPC servicers are adapters over the broker core, as the Kafka listener's APIs
are (test_kafka_adapters.py): each client-facing method names its caller
(`Authorization.caller_of`, or the servicer's `_caller` that calls it) and hands a request to
the core, which authorizes it. No method is wrapped in a ServicerContext-based check, and none
reaches into what the core works with (the registry, the coordinator, the offsets store, the
nodes' connections, the routing). Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

from seglog.v1 import gateway_pb2, groups_pb2, share_groups_pb2, transactions_pb2
from services.gateway.authorization import Authorization

GATEWAY = Path(__file__).resolve().parents[2] / "services" / "gateway"
SERVICERS = {
    "routing/service.py": "GatewayService",
    "cluster/admin_service.py": "AdminService",
    "cluster/acl_service.py": "AclService",
    "cluster/quota_service.py": "QuotaService",
    "cluster/reassignment_service.py": "ReassignmentService",
    "groups/group_service.py": "GroupCoordinatorService",
    "transactions/txn_service.py": "TransactionCoordinatorService",
    "share/share_service.py": "ShareGroupsService",
}
# What the core works with: a servicer method touching one is doing the core's work.
CORE_INTERNALS = frozenset(
    {
        "registry",
        "coordinator",
        "offsets",
        "connections",
        "producing",
        "fetching",
        "queries",
        "leaders",
        "coordination",
    }
)
# The node-facing messages: a servicer building them is relaying to nodes itself.
NODE_FACING = ("seglog.v1.storage_pb2",)


def _client_methods() -> set[str]:
    methods = set(gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].methods_by_name)
    methods |= set(groups_pb2.DESCRIPTOR.services_by_name["GroupCoordinator"].methods_by_name)
    txn = transactions_pb2.DESCRIPTOR.services_by_name["TransactionCoordinator"]
    share = share_groups_pb2.DESCRIPTOR.services_by_name["ShareGroups"]
    return methods | set(txn.methods_by_name) | set(share.methods_by_name)


def _servicer_class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"{path}: no class {name}")


def _method_problems(method: ast.FunctionDef) -> list[str]:
    problems = []
    names_caller = False
    for node in ast.walk(method):
        if isinstance(node, ast.Attribute):
            if node.attr in ("caller_of", "_caller", "_set_decommissioned"):
                names_caller = True
            if (
                node.attr in CORE_INTERNALS
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                problems.append(f"line {node.lineno}: self.{node.attr}")
            if node.attr in ("guard", "allowed"):
                problems.append(f"line {node.lineno}: .{node.attr}")
    if not names_caller:
        problems.append("never names its Caller")
    return problems


def test_every_client_facing_grpc_method_is_an_adapter_over_the_core():
    wanted = _client_methods()
    found: set[str] = set()
    problems: dict[str, list[str]] = {}
    for relative, class_name in SERVICERS.items():
        path = GATEWAY / relative
        for node in _servicer_class(path, class_name).body:
            if isinstance(node, ast.FunctionDef) and node.name in wanted:
                found.add(node.name)
                method_problems = _method_problems(node)
                if method_problems:
                    problems[f"{class_name}.{node.name}"] = method_problems
    assert found == wanted, wanted - found
    assert not problems, problems


def test_the_servicers_send_nothing_to_nodes_themselves():
    for relative in SERVICERS:
        path = GATEWAY / relative
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "seglog.v1":
                imported = {f"seglog.v1.{alias.name}" for alias in node.names}
                assert not imported & set(NODE_FACING), (relative, node.lineno)


def test_no_servicer_context_check_is_left():
    """The core authorizes on the Caller: Authorization has no ServicerContext-based check
    to wrap a method in, and the method tables wrap none."""
    assert not hasattr(Authorization, "guard")
    assert not hasattr(Authorization, "allowed")
    tables = (GATEWAY / "grpc_services.py").read_text()
    assert "wrap=" not in tables and "guard" not in tables


def test_the_kafka_group_joins_call_the_same_membership_core():
    """Kafka's JoinGroup, SyncGroup, Heartbeat and LeaveGroup go through groups/membership.py,
    as the gRPC ones do, never to the coordinator directly."""
    path = GATEWAY / "kafka" / "group_apis.py"
    tree = ast.parse(path.read_text(), str(path))
    handlers = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name in ("join_group", "sync_group", "heartbeat", "leave_group")
    }
    assert len(handlers) == 4
    for name, handler in handlers.items():
        attributes = {n.attr for n in ast.walk(handler) if isinstance(n, ast.Attribute)}
        assert "membership" in attributes, name
        assert "coordinator" not in attributes, name
