"""Consumer groups, as Kafka's group coordinator keeps them: membership, rebalances and
assignments, committed offsets; both kept in the internal topic `__consumer_offsets` in
Kafka's own record formats.

    group_service.py          GroupCoordinatorService: the GroupCoordinator gRPC service
    coordinator.py            GroupCoordinator: group states, generations, rebalances
    managed_protocol.py       seglog's gRPC consumers on it: assignments computed by it
    classic_protocol.py       Kafka's classic protocol on it: JoinGroup/SyncGroup with the
                              assignment computed by a leader member, static members
    group_state.py            what it holds of a group and its members
    consumer_protocol.py      the consumer protocol's subscription and assignment bytes
    assignors.py              Kafka's range and roundrobin partition assignors
    offsets_store.py          committed offsets and group metadata in `__consumer_offsets`,
                              read back when a gateway takes a partition of it over
    offsets_formats.py        the byte layouts of that topic's keys and values
    group_metadata_writer.py  writes group metadata off the coordinator's lock
"""
