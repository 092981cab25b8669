"""The Kafka protocol listener: unmodified Kafka clients (librdkafka, kafka-python, the Java
client and its tools) against seglog.

Topology: the gateway is the Kafka broker. A listener runs inside each gateway process
(`--kafka-listen`, Kafka's `listeners`/`advertised.listeners`); Metadata presents the
gateway(s) as the brokers, and every partition's leader is a gateway, which relays by the
real leader exactly as the gRPC API does; for groups the gateway is the coordinator as on
the gRPC path. Why: clients need one address, as with WarpStream or Tansu; the data path,
routing, ACLs, groups and the control plane stay exactly as they are: each Kafka API decodes
its request, calls the broker core (the typed admin, ACL, quota, group and producer-id calls
of cluster/ and groups/, which authorize the call's Caller) and encodes the core's answer;
storage nodes never speak Kafka. The cost is one relay hop, which the gRPC path pays too.

The codec is kafka-python's message classes, generated from Kafka's JSON schemas (pinned:
it is an internal API of kafka-python); no message layout is written here.

    listener.py      acceptors, network threads and handler pools; builds the api table
    connection_quotas.py  max.connections, per address and its overrides
    processor.py     a network thread: a selector over its connections
    connection_deadlines.py  a network thread's timers: handshake, first request, idle
    request_dispatch.py  requests to the handler pools; parked while their queue is full
    channel.py       one connection's bytes: TLS, frames read in checked steps, answers
    handler_pool.py  the request handler threads and their bounded queue
    connection.py    one connection's requests: one at a time, answers in order
    framing.py       size-prefixed frames, request/response headers
    api_table.py     api key -> request class, versions served, handler
    kafka_call.py    a request as handlers see it: its session, core objects and Caller
    error_codes.py   seglog reasons -> Kafka error codes (one table)
    brokers.py       gateways as brokers: ids, addresses, partition leaders
    apis.py          the APIs served: each area's module named, `register(table)`
    core.py          the core objects handlers call (`KafkaCall.core`), not the Gateway
    *_apis.py        each area's APIs
"""
