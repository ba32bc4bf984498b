"""The `sync:` service (adb push/pull/ls) over the rootfs, as the shell user would see it.

The service runs in the test process as root, so it checks permissions itself as uid 2000 would meet
them (owner/group/other bits, search permission on every parent, read-only mounts) and gives pushed
files to uid 2000, as adbd does. Requests are `id + u32 LE length + payload`; a SEND's DATA records may
straddle WRTE boundaries, which `Stream.read_exact` absorbs.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .adbd import Stream, StreamClosed
from .rootfs import SHELL_UID, Mount, Rootfs

SYNC_DATA_MAX = 64 * 1024
_U32 = struct.Struct("<I")
_STAT_V1 = struct.Struct("<4sIII")
_STAT_V2 = struct.Struct("<4sIQQIIIIQqqq")
_DENT = struct.Struct("<4sIIII")


class SyncError(Exception):
    """A failed file operation, reported to the host as `FAIL` + message (or an errno in STA2)."""

    def __init__(self, op: str, err: int) -> None:
        super().__init__(f"{op}: {os.strerror(err)}")
        self.errno = err


@dataclass
class SyncFaults:
    """Failure knobs the sync service reads on every request (mutable: tests flip them mid-run)."""

    # Bytes that may still be written to /data and /sdcard; None = unlimited, 0 = disk full.
    data_quota_bytes: int | None = None
    # Cut the whole transport once this many file bytes went out in RECV replies (one-shot).
    drop_after_recv_bytes: int | None = None


def _allowed(st: os.stat_result, want: int) -> bool:
    """Would uid/gid 2000 (no supplementary groups) get `want` (r=4, w=2, x=1) on this inode?"""
    if st.st_uid == SHELL_UID:
        bits = st.st_mode >> 6
    elif st.st_gid == SHELL_UID:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


class DeviceFs:
    """Device paths -> rootfs paths, with the shell user's permissions."""

    def __init__(self, rootfs: Rootfs) -> None:
        self.rootfs = rootfs

    def resolve(self, device_path: str, *, follow: bool = True) -> tuple[Path, Mount]:
        """Host path for `device_path`, after checking search permission on every parent.

        Symlinks (cpuN/cpufreq) must stay inside the rootfs: one leading to the host is "missing".
        """
        mapped = self.rootfs.host_path(device_path)
        if mapped is None:
            raise SyncError(device_path, errno.ENOENT)
        path, mount = mapped
        mount_root = self.rootfs.root / mount.rootfs_path
        real = Path(os.path.realpath(path if follow else path.parent))
        if not real.is_relative_to(self.rootfs.root):
            raise SyncError(device_path, errno.ENOENT)
        directory = mount_root
        for part in path.relative_to(mount_root).parts:
            if not directory.is_dir():
                break  # the stat that follows reports ENOENT/ENOTDIR
            if not _allowed(directory.stat(), 1):
                raise SyncError(device_path, errno.EACCES)
            directory = directory / part
        return path, mount

    def stat(self, device_path: str, *, follow: bool) -> os.stat_result:
        """stat/lstat as uid 2000; SyncError with the errno on failure."""
        path, _ = self.resolve(device_path, follow=follow)
        try:
            return path.stat() if follow else path.lstat()
        except OSError as exc:
            raise SyncError(device_path, exc.errno or errno.EIO) from None


class SyncSession:
    """One `sync:` stream: serves requests until QUIT, a failure that ends it, or the host closing."""

    def __init__(self, stream: Stream, fs: DeviceFs, faults: SyncFaults, on_push: Callable[[str, int], None]) -> None:
        self.stream = stream
        self.fs = fs
        self.faults = faults
        self.on_push = on_push
        self._recv_sent = 0

    def serve(self) -> None:
        """Request loop."""
        while True:
            request = self.stream.read_exact(8)
            req_id, length = request[:4], _U32.unpack(request[4:])[0]
            if req_id == b"QUIT":
                return
            if length > 1024:
                self._fail("path too long")  # adbd's limit, not a file error
                return
            path = self.stream.read_exact(length).decode("utf-8", "surrogateescape")
            handler = {
                b"STAT": self._stat_v1,
                b"STA2": self._stat_v2,
                b"LST2": self._stat_v2,
                b"LIST": self._list,
                b"SEND": self._send,
                b"RECV": self._recv,
            }.get(req_id)
            if handler is None:
                self._fail(f"unknown command {req_id!r}")
                return
            if not handler(path, req_id):
                return  # a FAIL ends the sync stream, as in adbd

    def _fail(self, message: str) -> bool:
        data = message.encode()
        self.stream.write(b"FAIL" + _U32.pack(len(data)) + data)
        return False

    def _stat_v1(self, path: str, _req: bytes) -> bool:
        try:
            st = self.fs.stat(path, follow=False)
            reply = _STAT_V1.pack(b"STAT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime))
        except SyncError:
            reply = _STAT_V1.pack(b"STAT", 0, 0, 0)  # v1 has no errno: all zero means "not there"
        self.stream.write(reply)
        return True

    def _stat_v2(self, path: str, req: bytes) -> bool:
        try:
            st = self.fs.stat(path, follow=req == b"STA2")
        except SyncError as exc:
            self.stream.write(_STAT_V2.pack(req, exc.errno, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            return True
        self.stream.write(
            _STAT_V2.pack(
                req,
                0,
                st.st_dev,
                st.st_ino,
                st.st_mode,
                st.st_nlink,
                st.st_uid,
                st.st_gid,
                st.st_size,
                int(st.st_atime),
                int(st.st_mtime),
                int(st.st_ctime),
            )
        )
        return True

    def _list(self, path: str, _req: bytes) -> bool:
        try:
            directory, _ = self.fs.resolve(path)
            st = directory.stat()
            if not stat.S_ISDIR(st.st_mode) or not _allowed(st, 5):
                raise SyncError(path, errno.EACCES)
            names = [".", "..", *sorted(entry.name for entry in directory.iterdir())]
        except (SyncError, OSError):
            names = []  # adbd answers a LIST it cannot open with just DONE
            directory = Path()
        for name in names:
            try:
                st = (directory / name).lstat()
            except OSError:
                continue
            raw = name.encode("utf-8", "surrogateescape")
            self.stream.write(
                _DENT.pack(b"DENT", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime), len(raw)) + raw
            )
        self.stream.write(_DENT.pack(b"DONE", 0, 0, 0, 0))
        return True

    def _send(self, spec: str, _req: bytes) -> bool:
        device_path, _, mode_text = spec.rpartition(",")
        try:
            mode = int(mode_text)
        except ValueError:
            return self._fail(f"bad SEND spec {spec!r}")
        try:
            path, mount = self._prepare_send(device_path, mode)
        except SyncError as exc:
            self._fail(f"couldn't create file: {os.strerror(exc.errno)}")
            self._drain_data()  # keep reading until DONE so the host sees the FAIL, as adbd does
            return False
        error: str | None = None
        written = 0
        with path.open("wb") as out:
            while True:
                header = self.stream.read_exact(8)
                chunk_id, length = header[:4], _U32.unpack(header[4:])[0]
                if chunk_id == b"DONE":
                    mtime = length  # DONE carries the mtime where DATA carries a length
                    break
                if chunk_id != b"DATA" or length > SYNC_DATA_MAX:
                    error = "invalid data message"
                    break
                data = self.stream.read_exact(length)
                quota = self.faults.data_quota_bytes
                if mount.on_data_partition and quota is not None:
                    if len(data) > quota:
                        error = f"write failed: {os.strerror(errno.ENOSPC)}"
                        break
                    self.faults.data_quota_bytes = quota - len(data)
                out.write(data)
                written += len(data)
        if error is not None:
            path.unlink(missing_ok=True)  # adbd removes a partial file
            self._fail(error)
            self._drain_data()  # keep reading until DONE so the host sees the FAIL, as adbd does
            return False
        os.utime(path, (mtime, mtime))
        self.on_push(device_path, written)
        self.stream.write(b"OKAY" + _U32.pack(0))
        return True

    def _prepare_send(self, device_path: str, mode: int) -> tuple[Path, Mount]:
        if stat.S_ISLNK(mode):
            raise SyncError(device_path, errno.EPERM)  # symlink pushes are not emulated
        path, mount = self.fs.resolve(device_path)
        mount_root = self.fs.rootfs.root / mount.rootfs_path
        if path == mount_root or path.is_dir():
            raise SyncError(device_path, errno.EISDIR)
        if not mount.writable:
            raise SyncError(device_path, errno.EROFS)
        # fixed_push_mkdir: adbd creates missing parents. The deepest existing directory gains a new
        # entry (a directory or the file), so the shell user needs write and search permission there.
        missing = []
        existing = path.parent
        while not existing.exists():
            missing.append(existing)
            existing = existing.parent
        if not existing.is_dir():
            raise SyncError(device_path, errno.ENOTDIR)
        if not _allowed(existing.stat(), 3):
            raise SyncError(device_path, errno.EACCES)
        for directory in reversed(missing):
            directory.mkdir()
            os.chown(directory, SHELL_UID, SHELL_UID)
            directory.chmod(0o775)
        if path.exists():
            path.unlink()
        path.touch()
        os.chown(path, SHELL_UID, SHELL_UID)
        path.chmod(stat.S_IMODE(mode))
        return path, mount

    def _drain_data(self) -> None:
        while True:
            header = self.stream.read_exact(8)
            if header[:4] != b"DATA":
                return
            self.stream.read_exact(_U32.unpack(header[4:])[0])

    def _recv(self, path: str, _req: bytes) -> bool:
        try:
            host_path, _ = self.fs.resolve(path)
            st = host_path.stat()
            if not _allowed(st, 4):
                raise SyncError(path, errno.EACCES)
            if stat.S_ISDIR(st.st_mode):
                raise SyncError(path, errno.EISDIR)
            handle = host_path.open("rb")
        except SyncError as exc:
            return self._fail(f"open failed: {os.strerror(exc.errno)}")
        except OSError as exc:
            return self._fail(f"open failed: {os.strerror(exc.errno or errno.EIO)}")
        with handle:
            while chunk := handle.read(SYNC_DATA_MAX):
                self._send_file_bytes(b"DATA" + _U32.pack(len(chunk)) + chunk, len(chunk))
        self.stream.write(b"DONE" + _U32.pack(0))
        return True

    def _send_file_bytes(self, record: bytes, file_bytes: int) -> None:
        limit = self.faults.drop_after_recv_bytes
        if limit is not None and self._recv_sent + file_bytes > limit:
            # Send what fits under the limit, then vanish like a phone whose cable was pulled.
            self.faults.drop_after_recv_bytes = None
            self.stream.write(record[: 8 + max(0, limit - self._recv_sent)])
            self.stream.transport.drop()
            raise StreamClosed("drop_after_recv_bytes fault fired")
        self._recv_sent += file_bytes
        self.stream.write(record)
