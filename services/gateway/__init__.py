"""The gateway: the API clients call, routing by partition leader, and the leader registry."""
