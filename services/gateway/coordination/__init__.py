"""How several gateways share one cluster through etcd (`--registry-etcd`): who holds what
is a key on a gateway's lease, so a gateway that dies or is cut off releases everything at
once and another takes it over. With the file registry (one gateway) the `Sole*` stand-ins
say that this gateway holds everything. No other plane is imported here.

    etcd_keyspace.py        the connection to etcd: seglog's keys under one prefix (the key
                            map is there), transactions, leases, one watch for all
    gateway_session.py      this gateway's own lease and what it holds on it
    election.py             which gateway is the controller, and the `Fence` its writes carry
    node_sessions.py        storage nodes' sessions as leases, renewed by any gateway
    group_coordinators.py   which gateway coordinates which consumer groups
"""
