import pytest

from tests.authorizer_modes import GROUP_GRANTS, cluster_in_mode


@pytest.fixture
def cluster(request, tmp_path):
    """Three nodes, the authorizer off; a test (or a module, through `pytestmark`) that asks
    for `pytest.mark.parametrize("cluster", AUTHORIZER_MODES, indirect=True)` runs with it off
    and on, with the module's `AUTHORIZER_GRANTS` (default: what group tests need)."""
    mode = getattr(request, "param", "authorizer-off")
    grants = getattr(request.module, "AUTHORIZER_GRANTS", GROUP_GRANTS)
    c = cluster_in_mode(tmp_path, mode, grants, nodes=3)
    yield c
    c.close()
