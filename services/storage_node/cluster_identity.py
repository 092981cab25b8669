"""Which cluster this node's data directory belongs to (its meta.properties, libs/seglog/
storage/meta_properties.py), and the rules that keep a registry of another cluster from
taking the node's partitions:

- At start the file is read: a torn or garbage one, or one naming another node id, stops the
  node before it loads a log (Kafka's broker refuses the same way).
- Registering, the node says its cluster id ("" when it has none) and how many partitions it
  holds; a registry of another cluster refuses it (INCONSISTENT_CLUSTER_ID, the gateway's
  registry_service.py), and so does a registry that never registered a node holding data
  but no id. The node then stops, exit code non-zero, the refusal in its log: nothing of
  its data touched.
- Its first answer's cluster id is written into meta.properties before any of its states is
  applied (a directory never registered: a brand-new node, or one from before cluster ids
  that this registry knew); an answer naming another cluster than the file stops the node
  the same way.
- Partitions are set aside as strays only on the word of a registry of the node's own
  cluster (`verified`): an answer or push without the same cluster id may create or change
  partitions but never removes one.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from seglog.errors import InconsistentClusterIdError
from seglog.storage import meta_properties
from seglog.storage.meta_properties import MetaProperties, MetaPropertiesError

logger = logging.getLogger(__name__)


class ClusterIdentity:
    def __init__(self, data_dir: Path, node_id: int) -> None:
        self.data_dir = data_dir
        self.node_id = node_id
        self._meta: MetaProperties | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read meta.properties (at start, before the logs): MetaPropertiesError for a file
        that is not a whole one or names another node."""
        meta = meta_properties.read(self.data_dir)
        if meta is not None and meta.node_id != self.node_id:
            raise MetaPropertiesError(
                f"stored node id {meta.node_id} in {meta_properties.path_of(self.data_dir)} "
                f"does not match this node's id {self.node_id}: if the data was moved, start "
                f"it as node {meta.node_id}; a new node needs an empty data directory"
            )
        self._meta = meta

    @property
    def cluster_id(self) -> str:
        """The directory's cluster id; "" before its first registration."""
        meta = self._meta
        return meta.cluster_id if meta is not None else ""

    def verified(self, cluster_id: str) -> bool:
        """Whether states carrying `cluster_id` come from a registry of this node's
        cluster (the only ones that may set partitions aside)."""
        meta = self._meta
        return meta is not None and bool(cluster_id) and cluster_id == meta.cluster_id

    def adopt(self, cluster_id: str) -> None:
        """A registry answered with `cluster_id`: written into a directory that has none;
        InconsistentClusterIdError when the directory is another cluster's."""
        with self._lock:
            meta = self._meta
            if meta is None:
                meta = meta_properties.new_identity(cluster_id, self.node_id)
                self.data_dir.mkdir(parents=True, exist_ok=True)
                meta_properties.write(self.data_dir, meta)
                self._meta = meta
                logger.info(
                    "data directory %s joins cluster %s (directory id %s)",
                    self.data_dir,
                    cluster_id,
                    meta.directory_id,
                )
            elif meta.cluster_id != cluster_id:
                raise InconsistentClusterIdError(
                    f"the registry answered as cluster {cluster_id}, and this node's data "
                    f"directory {self.data_dir} belongs to cluster {meta.cluster_id}: point "
                    f"the node at its own cluster's registry; if that cluster is gone for "
                    f"good and its data is not wanted, move the data directory aside and "
                    f"start the node empty"
                )
