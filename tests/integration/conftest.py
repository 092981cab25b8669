import pytest

from tests.cluster import LocalCluster


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path, nodes=3)
    yield c
    c.close()
