"""Kafka's `ssl.principal.mapping.rules`: from a certificate's subject distinguished name
("CN=alice,OU=eng,O=corp") to a principal's name.

    RULE:<pattern>/<replacement>/[L|U], ... , DEFAULT

Rules are tried in order; the first whose pattern matches the whole DN gives the name (its
replacement with $1, $2... from the groups; L or U lower- or upper-cases it). DEFAULT gives
the DN unchanged. Without rules seglog takes the subject's common name (see tls.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidConfigError

_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU])?)\s*(?:,|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalMapper:
    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        pos = 0
        text = rules.strip()
        while pos < len(text):
            found = _RULE.match(text, pos)
            if found is None or found.end() == pos:
                raise InvalidConfigError(
                    f"ssl.principal.mapping.rules: cannot read {text[pos:]!r} (expected "
                    f"RULE:pattern/replacement/[LU] or DEFAULT)"
                )
            default, pattern, replacement, case = found.groups()
            if default:
                self.rules.append(_Rule(None))
            else:
                try:
                    compiled = re.compile(pattern.replace("\\/", "/"))
                except re.error as exc:
                    raise InvalidConfigError(f"ssl.principal.mapping.rules: {exc}") from None
                # Kafka writes groups as $1; Python's re as \1.
                self.rules.append(
                    _Rule(
                        compiled,
                        re.sub(r"\$(\d+)", r"\\\1", replacement.replace("\\/", "/")),
                        case or "",
                    )
                )
            pos = found.end()

    def name(self, distinguished_name: str) -> str | None:
        """The principal's name, or None when no rule matches (the caller is refused)."""
        for rule in self.rules:
            if rule.pattern is None:
                return distinguished_name
            if rule.pattern.fullmatch(distinguished_name):
                name = rule.pattern.sub(rule.replacement, distinguished_name, count=1)
                return (
                    name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
                )
        return None
