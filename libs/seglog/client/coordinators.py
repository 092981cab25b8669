"""Sending each group's calls to the gateway that coordinates it (Kafka's FindCoordinator
dance): the bootstrap gateways are asked once which gateway coordinates the group, and its
calls go there; NOT_COORDINATOR names the right gateway and the call goes
there at once; a coordinator that cannot be reached is forgotten and the bootstrap gateways
are asked again, which know (or elect) the group's new one. With one gateway nothing ever
moves and every call goes to the bootstrap channel."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from ..errors import NodeUnavailableError, NotCoordinatorError
from ..rpc.status import error_from_rpc
from ..v1 import groups_pb2, groups_pb2_grpc

# Redirects one call follows before its error goes to the caller (whose retries back off).
_MAX_HOPS = 3
_FIND_TIMEOUT_S = 10.0


class GroupCoordinators:
    def __init__(
        self, bootstrap: grpc.Channel, open_channel: Callable[[str], grpc.Channel]
    ) -> None:
        self._bootstrap = groups_pb2_grpc.GroupCoordinatorStub(bootstrap)
        self._open_channel = open_channel
        self._lock = threading.Lock()
        self._coordinator: dict[str, str] = {}  # group id -> its coordinator's address
        self._stubs: dict[str, groups_pb2_grpc.GroupCoordinatorStub] = {}

    def coordinator_of(self, group_id: str) -> str:
        """The address calls about the group go to ("" : the bootstrap gateways)."""
        with self._lock:
            known = self._coordinator.get(group_id)
        if known is not None:
            return known
        try:
            found = self._bootstrap.FindCoordinator(
                groups_pb2.FindCoordinatorRequest(group_id=group_id), timeout=_FIND_TIMEOUT_S
            )
        except grpc.RpcError:
            return ""  # the call itself will fail or be redirected
        if found.error:
            return ""
        with self._lock:
            self._coordinator[group_id] = found.address
        return str(found.address)

    def forget(self, group_id: str) -> None:
        """The group's coordinator is to be asked again (it could not be reached)."""
        with self._lock:
            self._coordinator.pop(group_id, None)

    def stub_at(self, address: str) -> groups_pb2_grpc.GroupCoordinatorStub:
        if not address:
            return self._bootstrap
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = groups_pb2_grpc.GroupCoordinatorStub(
                    self._open_channel(address)
                )
            return stub

    def call(self, group_id: str, method: str, request: Any, timeout: float | None) -> Any:
        """The call, answered by the group's coordinator; a failed call raises its
        grpc.RpcError as a direct call would."""
        hops = 0
        while True:
            address = self.coordinator_of(group_id)
            try:
                return getattr(self.stub_at(address), method)(request, timeout=timeout)
            except grpc.RpcError as exc:
                if hops >= _MAX_HOPS:
                    raise
                error = error_from_rpc(exc)
                if isinstance(error, NotCoordinatorError):
                    with self._lock:
                        self._coordinator[group_id] = error.coordinator
                elif address and isinstance(error, NodeUnavailableError):
                    with self._lock:
                        self._coordinator.pop(group_id, None)
                else:
                    raise
                hops += 1

    def stub_for(self, group_id: str) -> RoutedGroupStub:
        return RoutedGroupStub(self, group_id)


class RoutedGroupStub:
    """A GroupCoordinator stub for one group whose calls follow its coordinator."""

    def __init__(self, coordinators: GroupCoordinators, group_id: str) -> None:
        self._coordinators = coordinators
        self._group_id = group_id

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(request: Any, timeout: float | None = None) -> Any:
            return self._coordinators.call(self._group_id, method, request, timeout)

        return call
