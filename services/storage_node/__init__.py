"""The storage node: one LogManager on one data dir, served over gRPC."""
