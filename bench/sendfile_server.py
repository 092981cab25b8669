"""The bare baseline of the bulk path: each connection gets the named files, whole and in
order, with os.sendfile, and is closed; nothing else.

    python -m bench.sendfile_server FILE...   prints `sendfile listening on HOST:PORT`
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def main() -> int:
    paths = sys.argv[1:]
    server = socket.create_server(("127.0.0.1", 0))
    print(f"sendfile listening on 127.0.0.1:{server.getsockname()[1]}", flush=True)

    def serve(conn: socket.socket) -> None:
        with conn:
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                try:
                    size, sent = os.fstat(fd).st_size, 0
                    while sent < size:
                        sent += os.sendfile(conn.fileno(), fd, sent, size - sent)
                finally:
                    os.close(fd)

    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
