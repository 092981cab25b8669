"""FileMapping: a read-only shared memory map of a file that holds no file descriptor.

Python's `mmap.mmap` (3.11) keeps a duplicate of the descriptor it was given for the life of
the map (to resize it and report its size), so each mapped index cost a descriptor beside
the one the index opened: five per partition with the `.log`. The kernel needs no
descriptor to keep a mapping valid (the mapping holds its own reference on the file), so
this maps through libc's mmap directly and lets the caller close the descriptor at once.

The price of raw memory is that a read after `unmap` would fault the process instead of
raising: `read_entry`/`read_bytes` and `unmap` hold the mapping's lock, so a reader either
sees the mapping whole or finds it gone (LogClosedError from the index above).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import struct
import threading

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


class FileMapping:
    """`length` bytes of the file open on `fd`, mapped PROT_READ and MAP_SHARED: stores made
    through the descriptor (pwrite) are visible here through the shared page cache."""

    def __init__(self, fd: int, length: int) -> None:
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mmap of {length} bytes failed: {os.strerror(errno)}")
        self.length = length
        self._address: int | None = address
        self._view: ctypes.Array[ctypes.c_char] | None = (ctypes.c_char * length).from_address(
            address
        )
        self._lock = threading.Lock()

    @property
    def is_mapped(self) -> bool:
        return self._view is not None

    def read_entry(self, entry: struct.Struct, position: int) -> tuple[int, ...] | None:
        """The entry at `position`, or None once unmapped."""
        with self._lock:
            if self._view is None:
                return None
            return entry.unpack_from(self._view, position)

    def read_bytes(self, start: int, end: int) -> bytes | None:
        with self._lock:
            if self._address is None:
                return None
            return ctypes.string_at(self._address + start, min(end, self.length) - start)

    def unmap(self) -> None:
        with self._lock:
            if self._address is None:
                return
            self._view = None
            _libc.munmap(self._address, self.length)
            self._address = None

    def __del__(self) -> None:
        # A mapping dropped without unmap (an index garbage-collected unclosed) is released
        # rather than leaked for the life of the process.
        if getattr(self, "_address", None) is not None:
            try:
                self.unmap()
            except Exception:  # interpreter shutdown: libc's wrapper may already be gone
                pass
