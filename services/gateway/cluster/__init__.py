"""The gateway's control plane: the leader registry (topics, each partition's replicas,
leader, epochs and ISR, the storage nodes, ACLs) and the controller that keeps it right.
Its state is one JSON document in a file, or in etcd when several gateways share it
(`coordination/`).

    registry.py            Registry: the state, its changes under one lock, routes for the
                           data plane, and listeners told of every change
    registry_store.py      where the state is kept: a file, or etcd by compare-and-swap
    partition_changes.py   how one partition's registration changes (elections, fencing,
                           ISR changes, replica placement): Kafka's rules
    topic_rules.py         what CreateTopics, CreatePartitions and config changes may do
    controller.py          the controller loop (expired sessions, preferred leaders) and
                           the partition states pushed to nodes
    admin_service.py       AdminService: the Gateway service's admin calls (topics,
                           configs, cluster description, producer ids)
    registry_service.py    RegistryService: nodes register, heartbeat, alter their ISRs
    acl_service.py         AclService: Kafka's Create/Describe/DeleteAcls
"""
