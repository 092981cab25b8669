"""Kafka's ssl.principal.mapping.rules: first matching rule wins, $n groups, L/U case,
DEFAULT the whole DN, no match refused, malformed rules refused."""

import pytest

from seglog.errors import InvalidConfigError
from seglog.security.principals import PrincipalMapper


def test_rules_map_distinguished_names_as_kafka():
    mapper = PrincipalMapper(
        r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L, DEFAULT"
    )
    assert mapper.name("CN=kafka-client,OU=ServiceUsers,O=Org") == "kafka-client"
    assert mapper.name("CN=Alice,OU=Eng,O=Corp") == "alice@eng"
    assert mapper.name("CN=bob") == "CN=bob"  # DEFAULT
    strict = PrincipalMapper(r"RULE:^CN=([a-z]+)$/$1/U")
    assert strict.name("CN=carol") == "CAROL"
    assert strict.name("CN=carol,O=x") is None
    with pytest.raises(InvalidConfigError, match="expected RULE"):
        PrincipalMapper("RULE:no-slashes")
    with pytest.raises(InvalidConfigError):
        PrincipalMapper("RULE:(/x/")
