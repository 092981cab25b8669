"""The object store of tiered storage (KIP-405): S3's API through boto3.

One `RemoteStore` per process, shared by its threads (a boto3 client is thread-safe; its
connection pool is sized by `max_pool_connections`). Every key is written under the config's
`prefix`, so one bucket can hold several clusters. Errors never leave this module as botocore
types: a missing object raises `RemoteObjectNotFoundError`, everything else (connection refused,
timeouts, 5xx, access denied) `RemoteStorageError`, both retriable SeglogErrors whose message
names the operation, the key and the cause.

Timeouts are short on purpose (connect 2 s, read 10 s) and botocore's own retries are few
(2 attempts): the copier retries with its own backoff, and a fetch below the local log start
must answer a retriable error in bounded time rather than hold a request thread while the
store is down.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from ..errors import SeglogError

# S3's DeleteObjects takes at most 1000 keys per request.
_DELETE_BATCH = 1000


class RemoteStorageError(SeglogError):
    """The object store did not do what was asked: unreachable, timed out, refused, 5xx."""

    reason = "KAFKA_STORAGE_ERROR"
    retriable = True


class RemoteObjectNotFoundError(RemoteStorageError):
    """An object that is not in the store (deleted by retention, or never finished)."""


@dataclass(frozen=True, kw_only=True)
class RemoteStorageConfig:
    """Where the objects go. Kafka names these through its RemoteStorageManager plugin's own
    keys (`remote.log.storage.manager.impl.prefix` + the plugin's); the S3 names here are the
    ones every S3 plugin uses."""

    endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"
    prefix: str = ""
    connect_timeout_ms: int = 2000
    read_timeout_ms: int = 10_000
    max_pool_connections: int = 16

    def __post_init__(self) -> None:
        if not self.endpoint_url or not self.bucket:
            raise SeglogError("remote storage needs an endpoint url and a bucket")

    def __repr__(self) -> str:  # the secret never reaches a log line
        return (
            f"RemoteStorageConfig(endpoint_url={self.endpoint_url!r}, bucket={self.bucket!r}, "
            f"region={self.region!r}, prefix={self.prefix!r})"
        )


class RemoteStore:
    """put/get/get_range/delete/list on one bucket, keys relative to the config's prefix."""

    def __init__(self, config: RemoteStorageConfig) -> None:
        self.config = config
        self._prefix = config.prefix.strip("/")
        self._lock = threading.Lock()
        self._client: Any = None

    def _s3(self) -> Any:
        # Built on first use: a node configured for a store that is down still starts.
        with self._lock:
            if self._client is None:
                c = self.config
                self._client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=c.endpoint_url,
                    aws_access_key_id=c.access_key_id,
                    aws_secret_access_key=c.secret_access_key,
                    region_name=c.region,
                    config=BotoConfig(
                        connect_timeout=c.connect_timeout_ms / 1000,
                        read_timeout=c.read_timeout_ms / 1000,
                        retries={"max_attempts": 2, "mode": "standard"},
                        max_pool_connections=c.max_pool_connections,
                        s3={"addressing_style": "path"},
                    ),
                )
            return self._client

    def full_key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    def _strip(self, full: str) -> str:
        return full[len(self._prefix) + 1 :] if self._prefix else full

    def _fail(self, op: str, key: str, exc: Exception) -> SeglogError:
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                return RemoteObjectNotFoundError(
                    f"remote object {key!r} not found in bucket {self.config.bucket!r}"
                )
            return RemoteStorageError(
                f"object store {op} of {key!r} failed: {code or 'error'}: {exc}"
            )
        return RemoteStorageError(
            f"object store {op} of {key!r} failed ({self.config.endpoint_url}): {exc}"
        )

    def put_file(self, key: str, path: str | Path) -> None:
        """Upload one local file whole (segments are at most segment.bytes: one PUT each)."""
        try:
            with open(path, "rb") as f:
                self._s3().put_object(Bucket=self.config.bucket, Key=self.full_key(key), Body=f)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("put", key, exc) from None
        except OSError as exc:
            # The local file's problem (retention took it), not the store's.
            raise SeglogError(f"reading {path} for upload to {key!r}: {exc}") from None

    def put_bytes(self, key: str, data: bytes) -> str:
        """Store a small object; returns its ETag (as `list_etags` shows it)."""
        try:
            answer = self._s3().put_object(
                Bucket=self.config.bucket, Key=self.full_key(key), Body=data
            )
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("put", key, exc) from None
        return str(answer.get("ETag", ""))

    def get(self, key: str) -> bytes:
        try:
            answer = self._s3().get_object(Bucket=self.config.bucket, Key=self.full_key(key))
            return bytes(answer["Body"].read())
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("get", key, exc) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the object's end; b"" for length 0)."""
        if start < 0 or length < 0:
            raise SeglogError(f"bad range {start}+{length} for {key!r}")
        if length == 0:
            return b""
        try:
            answer = self._s3().get_object(
                Bucket=self.config.bucket,
                Key=self.full_key(key),
                Range=f"bytes={start}-{start + length - 1}",
            )
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""
            raise self._fail("get", key, exc) from None
        except BotoCoreError as exc:
            raise self._fail("get", key, exc) from None

    def delete(self, keys: Iterable[str]) -> None:
        """Delete these keys (absent keys are not an error, as in S3)."""
        batch = [self.full_key(k) for k in keys]
        for i in range(0, len(batch), _DELETE_BATCH):
            part = batch[i : i + _DELETE_BATCH]
            try:
                answer = self._s3().delete_objects(
                    Bucket=self.config.bucket,
                    Delete={"Objects": [{"Key": k} for k in part], "Quiet": True},
                )
            except (BotoCoreError, ClientError) as exc:
                raise self._fail("delete", part[0], exc) from None
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise RemoteStorageError(
                    f"object store delete of {first.get('Key')!r} failed: "
                    f"{first.get('Code')}: {first.get('Message')}"
                )

    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix` (relative to the config's prefix), in key order."""
        return sorted(self.list_etags(prefix))

    def list_etags(self, prefix: str) -> dict[str, str]:
        """Every key under `prefix` with its ETag: what changed since a earlier listing, so
        a reader fetches only those (one LIST per 1000 keys instead of a GET per key)."""
        full = self.full_key(prefix)
        out: dict[str, str] = {}
        try:
            pages = self._s3().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.config.bucket, Prefix=full):
                for entry in page.get("Contents") or []:
                    out[self._strip(entry["Key"])] = str(entry.get("ETag", ""))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", prefix, exc) from None
        return out

    def create_bucket(self) -> None:
        """Make the bucket if it is not there (development and tests; production buckets are
        made by whoever owns the store)."""
        try:
            self._s3().create_bucket(Bucket=self.config.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._fail("create bucket", self.config.bucket, exc) from None
        except BotoCoreError as exc:
            raise self._fail("create bucket", self.config.bucket, exc) from None
