"""Share groups (KIP-932, Kafka's queues): many consumers read one partition, each record
acquired by one of them at a time under a lock, acknowledged one by one, redelivered when
released or when its lock lapses, archived after `group.share.delivery.count.limit`
deliveries. The Kafka adapter is kafka/share_group_apis.py and kafka/share_fetch_apis.py; the
gRPC one, seglog's ShareConsumer's, is share_service.py here.

    settings.py         the settings, Kafka's names
    share_partition.py  one (group, topic, partition)'s state: start offset, in-flight records
    offset_runs.py      the in-flight window as runs of alike offsets (per batch, not record)
    state_formats.py    the records of __share_group_state, Kafka's ShareSnapshot/ShareUpdate
    state_store.py      writing them before an acknowledgement is answered, reading them back
    wiring.py           the core built over the routing
    share_membership.py members, heartbeats, the simple assignor
    share_group_records.py  the membership's records in __consumer_offsets, Kafka's formats
    share_group_log.py  a group to those records on change and back on a coordinator's load
    share_core.py       the facade the adapters call
    share_service.py    the ShareGroups gRPC service (share_groups.proto) over the facade
    dead_letters.py     failed deliveries copied to the group's dead-letter topic (KIP-1191)
    archiving.py        their records persisted as archiving until copied (holder death)
"""
