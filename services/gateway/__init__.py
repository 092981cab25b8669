"""The gateway: the API clients call (and the one storage nodes call to register), in four
planes, one subpackage each, wired together by `server.py`:

    routing/        the data plane: Produce and Fetch relayed to partition leaders, the
                    per-leader requests (ListOffsets, SplitPoints, DeleteRecords),
                    bulk-fetch grants
    cluster/        the leader registry and the controller: topics, partition states, ACLs,
                    the admin calls and the Registry service nodes heartbeat to
    coordination/   several gateways sharing one cluster through etcd: the keyspace, each
                    gateway's session, the controller election, nodes' sessions, which
                    gateway coordinates which consumer groups
    groups/         consumer groups: membership and rebalances, committed offsets in
                    `__consumer_offsets`, the GroupCoordinator service

The planes depend one way: routing and groups read the cluster's registry, the cluster
keeps its state and elections through coordination, and coordination depends on no other
plane. The two protocol adapters sit above them: `kafka/` (Kafka's listener) and
`grpc_services.py` (the gRPC services' method tables). What serves every plane stays here:
`server.py` (the composition root: builds each part and hands each adapter what it calls),
`node_connections.py` (channels to storage nodes), `authorization.py` (ACL checks of a
Caller), `broker/` (the core's shared types), `gateway_metrics.py`, and `__main__.py` (the
command line). ARCHITECTURE.md writes the import layers; a test checks them.
"""
