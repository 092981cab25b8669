"""Transport security and identities: TLS credentials from PEM files (tls.py) and a small
certificate authority for local clusters and tests (certs.py)."""
