"""The parsers of the gateway's settings (settings.py): each checks a value as written, its
ValueError naming what is wrong."""

from __future__ import annotations

from pathlib import Path

from seglog.security.tokens import TokenVerifier

from .kafka.connection_quotas import parse_overrides
from .kafka.listener import parse_listener


def parse_tokens(
    jwks_file: str | None, token_file: str | None, audience: str | None
) -> TokenVerifier | None:
    if not jwks_file and not token_file:
        return None
    return TokenVerifier(
        Path(jwks_file) if jwks_file else None, Path(token_file) if token_file else None, audience
    )


def parse_kafka_listener(text: str) -> str | None:
    if not text:
        return None
    protocol, address = parse_listener(text)
    return f"{protocol}://{address}"


def parse_per_ip_overrides(text: str) -> str:
    """Checked (ValueError naming the bad part), kept as written."""
    parse_overrides(text)
    return text.strip()


def parse_at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"{value}: must be at least 1")
    return value
