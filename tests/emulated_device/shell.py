"""Shell services: `shell:` (v1), `shell,v2...:` (shell protocol) and `exec:`, pumped over a Stream.

v1 and exec carry raw bytes with stderr merged into stdout (adbd's SubprocessProtocol::kNone) and no
exit code. v2 frames data as `u8 id + u32 LE length + data` packets: stdout 1, stderr 2, and one exit
packet (id 3, one byte) before the stream closes; the host may send stdin (0), close-stdin (4) and
window-size (5) packets.
"""

from __future__ import annotations

import contextlib
import enum
import os
import selectors
import signal
import struct
import subprocess
import threading
from collections.abc import Callable
from typing import IO

from .adbd import Stream, StreamClosed

ID_STDIN = 0
ID_STDOUT = 1
ID_STDERR = 2
ID_EXIT = 3
ID_CLOSE_STDIN = 4
ID_WINDOW_SIZE = 5
_PACKET_HEADER = struct.Struct("<BI")
_READ_SIZE = 64 * 1024


class Protocol(enum.Enum):
    """How a command's output travels back to the host."""

    V1 = "v1"
    V2 = "v2"
    EXEC = "exec"


# spawn(command, merge_stderr) -> a started process with stdin/stdout(/stderr) pipes
Spawn = Callable[[str, bool], "subprocess.Popen[bytes]"]


def parse_service(service: str) -> tuple[Protocol, str] | None:
    """Split `shell,v2,TERM=xterm,raw:ls` into (protocol, command); None if not a shell service."""
    head, sep, command = service.partition(":")
    if not sep:
        return None
    if head == "exec":
        return Protocol.EXEC, command
    args = head.split(",")
    if args[0] != "shell":
        return None
    return (Protocol.V2 if "v2" in args[1:] else Protocol.V1), command


def packet(packet_id: int, data: bytes) -> bytes:
    """One shell-protocol packet."""
    return _PACKET_HEADER.pack(packet_id, len(data)) + data


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128+N for a child killed by signal N (Popen reports -N)."""
    return 128 - returncode if returncode < 0 else returncode


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's whole process group (it was started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_shell(stream: Stream, command: str, protocol: Protocol, spawn: Spawn) -> None:
    """Serve one shell/exec stream: run `command`, pump its output, report the exit code (v2).

    Runs on the stream's worker thread, which also waits for the child: `bwrap --die-with-parent`
    kills the sandbox when the thread that forked it exits, so spawning and waiting must share it.
    """
    proc = spawn(command, protocol is not Protocol.V2)
    finished = threading.Event()
    feeder = threading.Thread(
        target=_feed_stdin, args=(stream, proc, protocol, finished), name="adbd-shell-stdin", daemon=True
    )
    feeder.start()
    try:
        _pump_output(stream, proc, protocol)
        returncode = proc.wait()
    except StreamClosed:
        kill_group(proc)  # the host closed the stream: a real adbd kills the command too
        proc.wait()
        raise
    finally:
        finished.set()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    if protocol is Protocol.V2:
        stream.write(packet(ID_EXIT, bytes([exit_status(returncode) & 0xFF])))


def _pump_output(stream: Stream, proc: subprocess.Popen[bytes], protocol: Protocol) -> None:
    ids: dict[int, int] = {}
    with selectors.DefaultSelector() as selector:
        for pipe, packet_id in ((proc.stdout, ID_STDOUT), (proc.stderr, ID_STDERR)):
            if pipe is not None:
                selector.register(pipe.fileno(), selectors.EVENT_READ)
                ids[pipe.fileno()] = packet_id
        while ids:
            for key, _ in selector.select():
                fd = int(key.fd)
                data = os.read(fd, _READ_SIZE)
                if not data:
                    selector.unregister(fd)
                    del ids[fd]
                    continue
                stream.write(packet(ids[fd], data) if protocol is Protocol.V2 else data)


def _feed_stdin(stream: Stream, proc: subprocess.Popen[bytes], protocol: Protocol, finished: threading.Event) -> None:
    """Forward host data to the child's stdin; kill the child when the host closes the stream."""
    buffer = bytearray()
    stdin = proc.stdin
    while not finished.is_set():
        data = stream.recv(timeout=0.1)
        if data is None:
            continue
        if data == b"":
            if not finished.is_set():
                kill_group(proc)
            return
        if protocol is not Protocol.V2:
            stdin = _write_stdin(stdin, data)
            continue
        buffer += data
        while len(buffer) >= _PACKET_HEADER.size:
            packet_id, length = _PACKET_HEADER.unpack_from(buffer)
            if len(buffer) < _PACKET_HEADER.size + length:
                break
            body = bytes(buffer[_PACKET_HEADER.size : _PACKET_HEADER.size + length])
            del buffer[: _PACKET_HEADER.size + length]
            if packet_id == ID_STDIN:
                stdin = _write_stdin(stdin, body)
            elif packet_id == ID_CLOSE_STDIN and stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()
                stdin = None
            # ID_WINDOW_SIZE: no pty here, so there is nothing to resize.


def _write_stdin(stdin: IO[bytes] | None, data: bytes) -> IO[bytes] | None:
    """Write to the child's stdin; a child that stopped reading just loses the data, as on a phone."""
    if stdin is None:
        return None
    try:
        stdin.write(data)
        stdin.flush()
    except (BrokenPipeError, ValueError, OSError):
        return None
    return stdin
