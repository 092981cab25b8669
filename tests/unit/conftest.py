"""Fixtures shared by unit-test modules: the group coordinator's (tests/group_fixtures.py),
used by the tests of both member kinds."""

from tests.group_fixtures import coordinator, make_coordinator, registry

__all__ = ["coordinator", "make_coordinator", "registry"]
