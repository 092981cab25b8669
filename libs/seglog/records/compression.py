"""The five codecs of Kafka's `attributes` bits 0-2, with the framings Kafka writes and reads.

| id | codec  | framing on the wire                                                        |
|----|--------|----------------------------------------------------------------------------|
| 0  | none   | -                                                                          |
| 1  | gzip   | a gzip member (RFC 1952), as java.util.zip.GZIPOutputStream writes          |
| 2  | snappy | xerial snappy-java's stream: 16-byte header b"\\x82SNAPPY\\x00", version 1,    |
|    |        | compatible version 1, then blocks of (int32 length, raw snappy block).      |
|    |        | Reading also accepts a bare raw snappy block (old non-Java clients).        |
| 3  | lz4    | an LZ4 frame (magic 0x184D2204); v2 batches use the standard header checksum |
| 4  | zstd   | one or more zstd frames                                                    |

With compression the whole records section of a batch (everything after the 61-byte header)
is one compressed stream.

Decompression can be bounded (`max_bytes`): a stream that would inflate past it stops there
with CorruptRecordError, having produced at most about `max_bytes` (a small request must
not cost a server gigabytes; 261 KB of nested gzip once inflated to 1.1 GB).
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from ..errors import CorruptRecordError, SeglogError, UnsupportedCompressionError
from .inflation_budget import Grow, unlimited


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionError(
                f"unknown compression type {name!r}; expected one of "
                f"{', '.join(c.name.lower() for c in cls)}"
            ) from None


_XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_PREAMBLE = _XERIAL_HEADER + struct.pack(">ii", 1, 1)
# snappy-java's default block size: each 32 KiB of input is one raw snappy block.
_XERIAL_BLOCK_BYTES = 32 * 1024
_INT32 = struct.Struct(">i")
# Without a bound from the caller (a client reading what a server already checked).
UNBOUNDED_BYTES = 1 << 62


def _gzip_compress(data: bytes | memoryview) -> bytes:
    # wbits=31 writes a gzip member, the framing GZIPOutputStream produces.
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


class _TooLarge(Exception):
    pass


def _gzip_decompress(data: bytes | memoryview, max_bytes: int, grow: Grow) -> bytearray:
    # wbits=47 accepts gzip or zlib headers; concatenated members are legal gzip.
    out = bytearray()
    remaining = bytes(data)
    while remaining:
        d = zlib.decompressobj(47)
        pending = remaining
        while not d.eof:
            step = _step(out, max_bytes)
            grow(step)
            produced = d.decompress(pending, step)
            out += produced
            if len(out) > max_bytes:
                raise _TooLarge
            pending = d.unconsumed_tail
            if not produced and not pending:
                break  # input exhausted before the end-of-stream marker
        if not d.eof:
            raise CorruptRecordError("gzip stream ends before its end-of-stream marker")
        remaining = d.unused_data
    return out


def _snappy_compress(data: bytes | memoryview) -> bytes:
    parts = [_XERIAL_PREAMBLE]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy_length(block: memoryview) -> int:
    """A raw snappy block opens with its uncompressed length as a varint: read it first, so
    nothing is inflated past the bound."""
    length = shift = 0
    for i in range(min(len(block), 5)):
        byte = block[i]
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length
        shift += 7
    raise CorruptRecordError("snappy block has no valid length preamble")


def _snappy_decompress(data: bytes | memoryview, max_bytes: int, grow: Grow) -> bytes | bytearray:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_HEADER:
        length = _raw_snappy_length(view)
        if length > max_bytes:
            raise _TooLarge
        grow(length)
        return bytes(cramjam.snappy.decompress_raw(view))
    out = bytearray()
    pos = len(_XERIAL_PREAMBLE)
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError(f"xerial snappy block length cut at position {pos}")
        (block_bytes,) = _INT32.unpack_from(view, pos)
        pos += 4
        if block_bytes < 0 or pos + block_bytes > end:
            raise CorruptRecordError(
                f"xerial snappy block of {block_bytes} bytes at position {pos} "
                f"runs past the end of the stream ({end} bytes)"
            )
        block = view[pos : pos + block_bytes]
        length = _raw_snappy_length(block)
        if len(out) + length > max_bytes:
            raise _TooLarge
        grow(length)
        out += cramjam.snappy.decompress_raw(block)
        pos += block_bytes
    return out


def _lz4_compress(data: bytes | memoryview) -> bytes:
    # 64 KiB independent blocks, as KafkaLZ4BlockOutputStream writes them.
    compressed: bytes = lz4.frame.compress(
        data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False
    )
    return compressed


def _lz4_decompress(data: bytes | memoryview, max_bytes: int, grow: Grow) -> bytes | bytearray:
    if max_bytes >= UNBOUNDED_BYTES:
        decompressed: bytes = lz4.frame.decompress(data)
        return decompressed
    out = bytearray()
    remaining = bytes(data)
    while remaining:  # one or more frames, each read in bounded steps
        d = lz4.frame.LZ4FrameDecompressor()
        step = _step(out, max_bytes)
        grow(step)
        out += d.decompress(remaining, max_length=step)
        while not d.eof and not d.needs_input and len(out) <= max_bytes:
            step = _step(out, max_bytes)
            grow(step)
            out += d.decompress(b"", max_length=step)
        if len(out) > max_bytes:
            raise _TooLarge
        if not d.eof:
            raise CorruptRecordError("lz4 stream ends before its end mark")
        remaining = d.unused_data
    return out


# Bounded decompressors produce output in steps of at most this, so a bound of many
# megabytes is never allocated up front.
_STEP_BYTES = 1024 * 1024


def _step(out: bytearray, max_bytes: int) -> int:
    return min(_STEP_BYTES, max_bytes + 1 - len(out))


_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)


def _zstd_compress(data: bytes | memoryview) -> bytes:
    return _ZSTD_COMPRESSOR.compress(data)


def _zstd_decompress(data: bytes | memoryview, max_bytes: int, grow: Grow) -> bytes | bytearray:
    # The frame may omit its content size (streaming writers do): read across frames.
    if max_bytes >= UNBOUNDED_BYTES:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    out = bytearray()
    while len(out) <= max_bytes:
        step = _step(out, max_bytes)
        grow(step)
        chunk = reader.read(step)
        if not chunk:
            return out
        out += chunk
    raise _TooLarge


_Codec = Callable[[bytes | memoryview], bytes]
_BoundedCodec = Callable[[bytes | memoryview, int, Grow], bytes | bytearray]
_COMPRESSORS: dict[int, _Codec] = {
    CompressionType.GZIP: _gzip_compress,
    CompressionType.SNAPPY: _snappy_compress,
    CompressionType.LZ4: _lz4_compress,
    CompressionType.ZSTD: _zstd_compress,
}
_DECOMPRESSORS: dict[int, _BoundedCodec] = {
    CompressionType.GZIP: _gzip_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZSTD: _zstd_decompress,
}


MAX_CODEC = max(CompressionType)


# By id: a dict lookup, where calling the enum takes ~1 us (this runs once per batch read,
# written or checked).
_CODECS_BY_ID = {codec.value: codec for codec in CompressionType}


def check_codec(codec_id: int) -> CompressionType:
    codec = _CODECS_BY_ID.get(codec_id)
    if codec is None:
        raise UnsupportedCompressionError(
            f"compression codec id {codec_id} in attributes; expected 0-4"
        )
    return codec


def compress(codec_id: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """`data` compressed as one records section; `level` is Kafka's level for gzip (1-9, -1:
    zlib's default), lz4 (1-17) and zstd (zstd's levels), None the codec's default (snappy
    has none)."""
    codec = check_codec(codec_id)
    if codec is CompressionType.NONE:
        return bytes(data)
    if level is None or codec is CompressionType.SNAPPY:
        return _COMPRESSORS[codec](data)
    return _LEVELLED_COMPRESSORS[codec](data, level)


def _gzip_compress_at(data: bytes | memoryview, level: int) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)  # -1 is zlib's default (6)
    return compressor.compress(data) + compressor.flush()


def _lz4_compress_at(data: bytes | memoryview, level: int) -> bytes:
    compressed: bytes = lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        compression_level=min(level, 16),  # lz4's highest; Kafka's 17 is its max too
    )
    return compressed


def _zstd_compress_at(data: bytes | memoryview, level: int) -> bytes:
    # A compressor per call: one is not safe across threads (a node's handlers run several
    # appends at once), and making one costs microseconds beside compressing a batch.
    return zstandard.ZstdCompressor(level=level).compress(data)


_LEVELLED_COMPRESSORS: dict[int, Callable[[bytes | memoryview, int], bytes]] = {
    CompressionType.GZIP: _gzip_compress_at,
    CompressionType.LZ4: _lz4_compress_at,
    CompressionType.ZSTD: _zstd_compress_at,
}


def decompress(codec_id: int, data: bytes | memoryview, max_bytes: int = UNBOUNDED_BYTES) -> bytes:
    """Decompress one records section, to at most `max_bytes`; any codec failure, and an
    output that would pass the bound, becomes CorruptRecordError."""
    return bytes(decompress_into_budget(codec_id, data, max_bytes, unlimited))


def decompress_into_budget(
    codec_id: int, data: bytes | memoryview, max_bytes: int, grow: Grow
) -> bytes | bytearray:
    """`decompress`, reserving memory with `grow(nbytes)` before each step of output
    (inflation_budget.py), and without a final copy: a check reads the bytes and drops them."""
    codec = check_codec(codec_id)
    if codec is CompressionType.NONE:
        return bytes(data)
    try:
        return _DECOMPRESSORS[codec](data, max_bytes, grow)
    except _TooLarge:
        raise CorruptRecordError(
            f"{codec.name.lower()} records section of {len(data)} bytes decompresses to more "
            f"than {max_bytes} bytes"
        ) from None
    except SeglogError:  # CorruptRecordError, or the budget's refusal
        raise
    except Exception as exc:  # each codec library raises its own error types
        raise CorruptRecordError(
            f"{codec.name.lower()} records section of {len(data)} bytes does not decompress: {exc}"
        ) from exc
