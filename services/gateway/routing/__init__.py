"""The gateway's data plane: each request is routed by partition leader to the storage node
that holds it, without decoding a record (the registry's image says where; `cluster/`).

    service.py          GatewayService: Produce and Fetch, relayed as wire bytes (a
                        produce spanning nodes split, sent concurrently and merged)
    leader_queries.py   ListOffsets, SplitPoints, DeleteRecords: split by leader, one call
                        per node
    fetch_grants.py     FetchGrants: signed grants for the bulk path (sendfile from the node)
"""
