"""The `seglog` command."""

import os

# gRPC's core logs a failed TLS handshake at INFO on stderr ("Handshake failed with error
# SSL_ERROR_SSL ...") before the command's own error, which says the same and what to do
# (seglog/rpc/status.py). Its level is read as gRPC loads, which the command's modules do: set here,
# before any of them is imported. A GRPC_VERBOSITY the user set is kept.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
