"""Kafka's CreateAcls, DescribeAcls and DeleteAcls on the gateway: ACL bindings kept
durably in the registry (which hands every change to the authorizer). Who may call these is
the authorizer's to say (authorization.py: Alter / Describe on the cluster)."""

from __future__ import annotations

import grpc

from seglog.errors import SeglogError
from seglog.rpc.status import abort
from seglog.security.acls import AclBinding
from seglog.v1 import gateway_pb2

from .registry import Registry


class AclService:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def CreateAcls(
        self, request: gateway_pb2.CreateAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreateAclsResponse:
        try:
            self.registry.add_acls([_binding(a) for a in request.acls])
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.CreateAclsResponse()

    def DescribeAcls(
        self, request: gateway_pb2.DescribeAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeAclsResponse:
        response = gateway_pb2.DescribeAclsResponse()
        for acl in self.registry.acls:
            if (
                (not request.principal or acl.principal == request.principal)
                and (not request.resource_type or acl.resource_type == request.resource_type)
                and (not request.resource_name or acl.resource_name == request.resource_name)
            ):
                response.acls.add(**acl.to_json())
        return response

    def DeleteAcls(
        self, request: gateway_pb2.DeleteAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DeleteAclsResponse:
        deleted = self.registry.delete_acls([_binding(a) for a in request.acls])
        return gateway_pb2.DeleteAclsResponse(deleted=deleted)


def _binding(acl: gateway_pb2.AclBinding) -> AclBinding:
    return AclBinding(
        acl.principal,
        acl.host or "*",
        acl.resource_type,
        acl.pattern_type or "literal",
        acl.resource_name,
        acl.operation,
        acl.permission or "allow",
    )
