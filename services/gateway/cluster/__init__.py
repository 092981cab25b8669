"""The gateway's control plane: the leader registry (topics, each partition's replicas,
leader, epochs and ISR, the storage nodes, ACLs) and the controller that keeps it right.
Its state is a metadata log of small records, in a file, or in etcd when several gateways
share it (`coordination/`).

    registry.py            Registry: the controller's decisions, each one batch of records
    registry_state.py      the image, node sessions, deltas for nodes, routes for the data
                           plane, and listeners told of every change
    node_state.py          a node's session and the view of its partitions it is sent
    metadata_records.py    the record types and their order
    metadata_image.py      the image the records build, with per-node indexes
    metadata_history.py    which partitions changed at which offset (heartbeat deltas)
    registry_store.py      the store seam: snapshot + tail, append by compare-and-swap
    metadata_file_store.py the log in the gateway's data dir (framed, CRC32C, fsync'd)
    metadata_etcd_store.py the log in etcd (chunked batches, a head key, snapshots)
    partition_changes.py   how one partition's registration changes (elections, fencing,
                           ISR changes, replica placement): Kafka's rules
    topic_rules.py         what CreateTopics, CreatePartitions and config changes may do
    controller.py          the controller loop (expired sessions, preferred leaders) and
                           the partition states pushed to nodes
    admin_service.py       AdminService: the Gateway service's admin calls (topics,
                           configs, cluster description, producer ids)
    registry_service.py    RegistryService: nodes register, heartbeat, alter their ISRs
    acl_admin.py           AclAdmin: Kafka's Create/Describe/DeleteAcls, typed (the core)
    acl_service.py         AclService: the gRPC adapter over it
    client_quotas.py       ClientQuotaAdmin: Kafka's client quotas, typed (the core)
    quota_service.py       QuotaService: the gRPC adapter over it
"""
