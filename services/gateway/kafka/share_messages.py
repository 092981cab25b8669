"""The share-group APIs' request and response classes, made by kafka-python's codec from Kafka
4.3.1's own JSON schemas (share_schemas/, as kafka-clients-4.3.1.jar ships them): the codec
has no classes for them yet, and its ApiMessage reads any schema it is pointed at, so the
layouts are Kafka's, never written by hand."""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_message import ApiMessage

from . import share_schemas


def _message(name: str) -> Any:
    # Made with type() so the type checker takes them as Any, as it takes the codec's own.
    return type(name, (ApiMessage,), {"__module__": __name__}, load_json=share_schemas)


ShareGroupHeartbeatRequest: Any = _message("ShareGroupHeartbeatRequest")
ShareGroupHeartbeatResponse: Any = _message("ShareGroupHeartbeatResponse")
ShareGroupDescribeRequest: Any = _message("ShareGroupDescribeRequest")
ShareGroupDescribeResponse: Any = _message("ShareGroupDescribeResponse")
ShareFetchRequest: Any = _message("ShareFetchRequest")
ShareFetchResponse: Any = _message("ShareFetchResponse")
ShareAcknowledgeRequest: Any = _message("ShareAcknowledgeRequest")
ShareAcknowledgeResponse: Any = _message("ShareAcknowledgeResponse")
DescribeShareGroupOffsetsRequest: Any = _message("DescribeShareGroupOffsetsRequest")
DescribeShareGroupOffsetsResponse: Any = _message("DescribeShareGroupOffsetsResponse")
AlterShareGroupOffsetsRequest: Any = _message("AlterShareGroupOffsetsRequest")
AlterShareGroupOffsetsResponse: Any = _message("AlterShareGroupOffsetsResponse")
DeleteShareGroupOffsetsRequest: Any = _message("DeleteShareGroupOffsetsRequest")
DeleteShareGroupOffsetsResponse: Any = _message("DeleteShareGroupOffsetsResponse")
