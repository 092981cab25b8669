"""Kafka's CreateAcls, DescribeAcls and DeleteAcls on the gRPC API: an adapter over the
core's `AclAdmin` (acl_admin.py), which checks the caller."""

from __future__ import annotations

import grpc

from seglog.errors import SeglogError
from seglog.rpc.status import abort
from seglog.security.acls import AclBinding
from seglog.v1 import gateway_pb2

from ..authorization import Authorization
from .acl_admin import AclAdmin


class AclService:
    def __init__(self, acls: AclAdmin, authorization: Authorization) -> None:
        self.acls = acls
        self.authorization = authorization

    def CreateAcls(
        self, request: gateway_pb2.CreateAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.CreateAclsResponse:
        try:
            caller = self.authorization.caller_of(context)
            self.acls.create(caller, [_binding(a) for a in request.acls])
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.CreateAclsResponse()

    def DescribeAcls(
        self, request: gateway_pb2.DescribeAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DescribeAclsResponse:
        def wanted(acl: AclBinding) -> bool:
            return (
                (not request.principal or acl.principal == request.principal)
                and (not request.resource_type or acl.resource_type == request.resource_type)
                and (not request.resource_name or acl.resource_name == request.resource_name)
            )

        try:
            found = self.acls.describe(self.authorization.caller_of(context), wanted)
        except SeglogError as exc:
            abort(context, exc)
        response = gateway_pb2.DescribeAclsResponse()
        for acl in found:
            response.acls.add(**acl.to_json())
        return response

    def DeleteAcls(
        self, request: gateway_pb2.DeleteAclsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.DeleteAclsResponse:
        doomed = {_binding(a) for a in request.acls}
        try:
            caller = self.authorization.caller_of(context)
            (matched,) = self.acls.delete(caller, [doomed.__contains__])
        except SeglogError as exc:
            abort(context, exc)
        return gateway_pb2.DeleteAclsResponse(deleted=len(matched))


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
