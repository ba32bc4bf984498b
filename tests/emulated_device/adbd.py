"""A small adbd: the device end of the adb wire protocol, served on 127.0.0.1.

A real adb server attaches it with `adb connect 127.0.0.1:PORT`, exactly as it would a phone in
`adb tcpip` mode. This module knows messages, the handshake, authentication and streams; what a
service does (shell, sync) is decided by a `route` callable handed in by the device.

Threads: one accept thread, one reader thread per transport, and one worker per stream. The reader
only queues host data and acknowledges it; handlers run on their worker, because a handler that
writes must wait for an OKAY that only the reader can receive (handling a WRTE on the reader thread
deadlocks the first `adb pull`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

A_SYNC = 0x434E5953
A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_STLS = 0x534C5453

A_VERSION = 0x01000001
MAX_PAYLOAD = 1024 * 1024
HEADER = struct.Struct("<6I")

AUTH_TOKEN = 1
AUTH_SIGNATURE = 2
AUTH_RSAPUBLICKEY = 3

# What this adbd implements, and nothing more: advertising delayed_ack, ls_v2, sendrecv_v2 or abb
# would make the host speak protocol variants we do not serve.
FEATURES = ("shell_v2", "cmd", "stat_v2", "fixed_push_mkdir", "fixed_push_symlink_timestamp")

# How long a stream writer waits for the host's OKAY before treating the transport as dead. The adb
# server acknowledges at once; only a wedged transport gets near this, and then nothing must hang.
WRITE_ACK_TIMEOUT = 30.0


class StreamClosed(Exception):
    """The host closed the stream (or the transport went away) while a handler used it."""


Handler = Callable[["Stream"], None]


class Stream:
    """One adb stream, seen from the service handler that runs on its own worker thread."""

    def __init__(self, transport: Transport, local_id: int, remote_id: int, service: str) -> None:
        self.transport = transport
        self.local_id = local_id
        self.remote_id = remote_id
        self.service = service
        self._inbox: queue.Queue[bytes | None] = queue.Queue()
        self._pending = bytearray()
        self._eof = False
        self._acked = threading.Event()
        self._acked.set()  # the device may send its first WRTE right after OKAY-ing the OPEN
        self.closed = threading.Event()
        self._write_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._close_sent = False

    # --- called on the transport reader thread -------------------------------------------------
    def _feed(self, data: bytes) -> None:
        self._inbox.put(data)

    def _on_okay(self) -> None:
        self._acked.set()

    def _on_remote_close(self) -> None:
        self.closed.set()
        self._acked.set()  # wake a writer waiting for an OKAY that will never come
        self._inbox.put(None)

    # --- called by the handler ----------------------------------------------------------------
    def recv(self, timeout: float | None = None) -> bytes | None:
        """Next chunk of host data; b"" once the host has closed, None if `timeout` passed first."""
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            return data
        if self._eof:
            return b""
        try:
            item = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._eof = True
            return b""
        return item

    def read_exact(self, n: int) -> bytes:
        """Exactly `n` bytes of host data, across WRTE boundaries; StreamClosed if the host closes."""
        while len(self._pending) < n:
            if self._eof:
                raise StreamClosed(self.service)
            item = self._inbox.get()
            if item is None:
                self._eof = True
                raise StreamClosed(self.service)
            self._pending += item
        data = bytes(self._pending[:n])
        del self._pending[:n]
        return data

    def write(self, data: bytes) -> None:
        """Send `data` as WRTE messages, one in flight at a time, each waiting for the host's OKAY."""
        limit = self.transport.max_payload
        with self._write_lock:
            for start in range(0, len(data), limit):
                if not self._acked.wait(WRITE_ACK_TIMEOUT):
                    self.transport.drop()
                    raise StreamClosed(f"{self.service}: no OKAY from the host in {WRITE_ACK_TIMEOUT} s")
                if self.closed.is_set():
                    raise StreamClosed(self.service)
                self._acked.clear()
                self.transport.send(A_WRTE, self.local_id, self.remote_id, data[start : start + limit])

    def close(self) -> None:
        """Close from the device side (CLSE), once; a no-op after the host closed the stream."""
        with self._close_lock:
            if self._close_sent:
                return
            self._close_sent = True
        already_closed = self.closed.is_set()
        self.closed.set()
        self.transport.forget(self.local_id)
        if not already_closed:
            with contextlib.suppress(StreamClosed):
                self.transport.send(A_CLSE, self.local_id, self.remote_id)


class Transport:
    """One TCP connection from the adb server: handshake, auth, and stream multiplexing."""

    def __init__(self, adbd: Adbd, sock: socket.socket) -> None:
        self.adbd = adbd
        self.sock = sock
        self.max_payload = 4096  # until CNXN says otherwise
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._streams_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._connected = False
        self._dead = threading.Event()

    def send(self, command: int, arg0: int, arg1: int, payload: bytes = b"") -> None:
        """Send one message; StreamClosed if the connection is gone."""
        header = HEADER.pack(command, arg0, arg1, len(payload), sum(payload) & 0xFFFFFFFF, command ^ 0xFFFFFFFF)
        try:
            with self._send_lock:
                self.sock.sendall(header + payload)
        except OSError as exc:
            self._dead.set()
            raise StreamClosed(f"transport send failed: {exc}") from exc

    def drop(self) -> None:
        """Cut the connection as a vanished phone would; the reader thread then cleans up."""
        self._dead.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def forget(self, local_id: int) -> None:
        """Stop routing host messages to a stream the device has closed."""
        with self._streams_lock:
            self._streams.pop(local_id, None)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def serve(self) -> None:
        """Reader loop: runs until the host disconnects, the device drops it, or a bad header."""
        try:
            while not self._dead.is_set():
                header = self._recv_exact(HEADER.size)
                if header is None:
                    break
                command, arg0, arg1, length, _checksum, magic = HEADER.unpack(header)
                if magic != command ^ 0xFFFFFFFF or length > MAX_PAYLOAD:
                    break  # not adb, or a host ignoring our max payload: a real adbd drops it too
                payload = self._recv_exact(length) if length else b""
                if payload is None:
                    break
                self._dispatch(command, arg0, arg1, payload)
        except Exception as exc:  # a bug here must surface in the test, not vanish with the thread
            self.adbd.report_error(exc)
        finally:
            self._dead.set()
            with self._streams_lock:
                streams = list(self._streams.values())
                self._streams.clear()
            for stream in streams:
                stream._on_remote_close()
            with contextlib.suppress(OSError):
                self.sock.close()

    def _dispatch(self, command: int, arg0: int, arg1: int, payload: bytes) -> None:
        if command == A_CNXN:
            self._on_connect(arg0, arg1)
        elif command == A_AUTH:
            self._on_auth(arg0)
        elif not self._connected:
            return  # everything but the handshake is ignored until CNXN, as adbd does
        elif command == A_OPEN:
            self._on_open(arg0, payload)
        elif command == A_WRTE:
            stream = self._lookup(arg1)
            if stream is not None:
                stream._feed(payload)
                # Acknowledge at once: the stream queue absorbs the data, so the host never waits
                # on a slow handler (sync writes are bounded by the file being pushed).
                self.send(A_OKAY, arg1, arg0)
        elif command == A_OKAY:
            stream = self._lookup(arg1)
            if stream is not None:
                stream._on_okay()
        elif command == A_CLSE:
            with self._streams_lock:
                stream = self._streams.pop(arg1, None)
            if stream is not None:
                stream._on_remote_close()

    def _lookup(self, local_id: int) -> Stream | None:
        with self._streams_lock:
            return self._streams.get(local_id)

    def _on_connect(self, version: int, max_payload: int) -> None:
        if self.adbd.unauthorized:
            # A device whose user never taps "Allow": challenge, reject every signature, and wait
            # forever after the public key. The real server then lists it as `unauthorized`.
            self.send(A_AUTH, AUTH_TOKEN, 0, os.urandom(20))
            return
        self.max_payload = max(256, min(max_payload, MAX_PAYLOAD))
        self._connected = True
        self.send(A_CNXN, min(version, A_VERSION), self.max_payload, self.adbd.banner.encode())

    def _on_auth(self, auth_type: int) -> None:
        if self.adbd.unauthorized and auth_type == AUTH_SIGNATURE:
            self.send(A_AUTH, AUTH_TOKEN, 0, os.urandom(20))

    def _on_open(self, remote_id: int, payload: bytes) -> None:
        service = payload.rstrip(b"\0").decode("utf-8", "replace")
        handler = self.adbd.route(service)
        if handler is None:
            self.send(A_CLSE, 0, remote_id)
            return
        stream = Stream(self, next(self._ids), remote_id, service)
        with self._streams_lock:
            self._streams[stream.local_id] = stream
        self.send(A_OKAY, stream.local_id, remote_id)
        threading.Thread(
            target=self._run_handler, args=(handler, stream), name=f"adbd-stream-{service[:40]}", daemon=True
        ).start()

    def _run_handler(self, handler: Handler, stream: Stream) -> None:
        try:
            handler(stream)
        except StreamClosed:
            pass  # the host went away mid-service: normal for killed commands and dropped links
        except Exception as exc:
            self.adbd.report_error(exc)
        finally:
            stream.close()


@dataclass
class AdbdStats:
    """Counters a test can assert on (how many transports the server opened)."""

    connections: int = 0


class Adbd:
    """Listener plus transports; `route(service)` returns a handler or None to refuse the stream."""

    def __init__(
        self,
        *,
        banner: str,
        route: Callable[[str], Handler | None],
        on_error: Callable[[BaseException], None],
        unauthorized: bool = False,
    ) -> None:
        self.banner = banner
        self.route = route
        self.unauthorized = unauthorized
        self.offline = False
        self.stats = AdbdStats()
        self._on_error = on_error
        self._sock: socket.socket | None = None
        self._transports: list[Transport] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._accept_thread: threading.Thread | None = None

    @staticmethod
    def make_banner(name: str, model: str, device: str) -> str:
        """The CNXN banner a phone sends: product props the server shows in `adb devices -l`."""
        props = f"ro.product.name={name};ro.product.model={model};ro.product.device={device};"
        return f"device::{props}features={','.join(FEATURES)}"

    @property
    def port(self) -> int:
        """The ephemeral TCP port the device listens on."""
        if self._sock is None:
            raise RuntimeError("adbd is not started")
        return int(self._sock.getsockname()[1])

    def start(self) -> int:
        """Listen on 127.0.0.1 at an ephemeral port and return it.

        Port 0, never 5555-5585: the adb server adopts anything speaking adbd there as an emulator,
        and a developer's own server could grab the device.
        """
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        self._sock = sock
        self._accept_thread = threading.Thread(target=self._accept_loop, name="adbd-accept", daemon=True)
        self._accept_thread.start()
        return self.port

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # listener closed by stop()
            if self.offline or self._stopped.is_set():
                conn.close()  # an unplugged phone: the server sees the connection die at once
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = Transport(self, conn)
            with self._lock:
                self._transports.append(transport)
                self.stats.connections += 1
            threading.Thread(target=transport.serve, name="adbd-transport", daemon=True).start()

    def drop_transports(self) -> None:
        """Close every live connection (the server marks the device offline, then reconnects)."""
        with self._lock:
            transports, self._transports = self._transports, []
        for transport in transports:
            transport.drop()

    def go_offline(self) -> None:
        """Drop the connection and refuse new ones until `come_online()`."""
        self.offline = True
        self.drop_transports()

    def come_online(self) -> None:
        """Accept connections again; the server reconnects on its own after a few seconds."""
        self.offline = False

    def report_error(self, exc: BaseException) -> None:
        """Hand an internal error to the owner (the fixture fails the test with it)."""
        self._on_error(exc)

    def stop(self) -> None:
        """Stop listening and drop every transport; workers see their streams close."""
        self._stopped.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        self.drop_transports()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
