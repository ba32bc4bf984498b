"""Files on the device by content: push once, verify on the device, never expose a half-written file.

Layout under :data:`REMOTE_ROOT` (``/data/local/tmp/pytest_sme2``): every pushed file (runner
builds, ``libc++_shared.so``, ``.pte``, inputs) lives at ``<sha256[:16]>/<file name>``. A push goes
to a private ``.part`` name, is checked with ``sha256sum`` on the device, renamed into place, and
only then gets its ``.sha256`` marker. :func:`deploy` skips the push when marker *and* size match,
so concurrent sessions sharing a phone never see half-written binaries and need no lock.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import adbutils

from pytest_sme2.errors import ConfigError, DeviceError, RunnerError
from pytest_sme2.runners.android.adb import AdbLink, join_args, quote
from pytest_sme2.store.files import file_sha256

#: Where everything goes on the device: the shell user's scratch space, writable without root.
REMOTE_ROOT = "/data/local/tmp/pytest_sme2"


@dataclass(frozen=True)
class Deployed:
    """A local file and where its content lives on the device."""

    local: Path
    remote: str
    sha256: str
    size: int
    pushed: bool


def remote_path(remote_root: str, sha256: str, name: str) -> str:
    """Where a file with this content and name lives on the device."""
    return f"{remote_root}/{sha256[:16]}/{name}"


def deploy(link: AdbLink, files: Sequence[Path], run_id: str, remote_root: str) -> dict[Path, Deployed]:
    """Make each file's content present on the device; push only what is missing or damaged."""
    entries = []
    for path in dict.fromkeys(files):
        try:
            digest, size = file_sha256(path), path.stat().st_size
        except OSError as exc:
            raise ConfigError(f"cannot read {path} to push it to the device: {exc.strerror}") from None
        entries.append((path, digest, size, remote_path(remote_root, digest, path.name)))
    checks = [
        f"if [ \"$(cat {quote(remote + '.sha256')} 2>/dev/null)\" = {quote(digest)} ] && "
        f"[ \"$(stat -c %s {quote(remote)} 2>/dev/null)\" = {quote(size)} ]; then echo present; else echo absent; fi"
        for _, digest, size, remote in entries
    ]
    answer = link.shell("; ".join(checks), what="checking which files are already on the device").stdout.split()
    if len(answer) != len(entries):
        raise DeviceError(f"unexpected answer from Android device {link.serial} while checking pushed files: "
                          f"{' '.join(answer)[:200]!r}; rerun, and report this if it persists")
    missing = [e for e, state in zip(entries, answer, strict=True) if state != "present"]
    if missing:
        dirs = sorted({str(PurePosixPath(remote).parent) for *_, remote in missing})
        link.shell(join_args(["mkdir", "-p", *dirs]), what="creating directories for pushed files")
    for path, digest, size, remote in missing:
        push(link, path, digest=digest, size=size, remote=remote, run_id=run_id, remote_root=remote_root)
    pushed = {e[0] for e in missing}
    return {path: Deployed(path, remote, digest, size, path in pushed) for path, digest, size, remote in entries}


def push(link: AdbLink, path: Path, *, digest: str, size: int, remote: str, run_id: str, remote_root: str) -> None:
    """Push to a private name, verify the hash on the device, then rename into place and mark it."""
    part = f"{remote}.{run_id}.part"
    device = link.device()
    serial = link.serial
    mode = 0o755 if os.access(path, os.X_OK) or path.suffix == ".so" else 0o644
    try:
        device.sync.push(path, part, mode=mode)
    except (adbutils.AdbError, OSError, EOFError) as exc:
        if str(exc) != "FAIL":  # anything but the device refusing the write: the link broke
            raise link.lost(f"pushing {path.name}", exc) from None
        link.try_shell(join_args(["rm", "-f", part]), what="removing a failed push")
        raise DeviceError(
            f"pushing {path} ({size} bytes) to Android device {serial} at {remote} failed: the device "
            "refused the write. The usual cause is full storage: free space on the phone (check with "
            f"`adb -s {serial} shell df -h /data`; `adb -s {serial} shell rm -rf {remote_root}` "
            "drops pytest-sme2's cached pushes) and rerun. Nothing was left half-written."
        ) from None
    marker = f"{remote}.sha256"
    commit = (
        f"[ \"$(sha256sum {quote(part)} | cut -d ' ' -f 1)\" = {quote(digest)} ] && "
        f"mv -f {quote(part)} {quote(remote)} && printf '%s\\n' {quote(digest)} > {quote(marker + '.' + run_id)} && "
        f"mv -f {quote(marker + '.' + run_id)} {quote(marker)}"
    )
    try:
        link.shell(commit, what=f"verifying the pushed {path.name}")
    except RunnerError as exc:
        link.try_shell(join_args(["rm", "-f", part, f"{marker}.{run_id}"]), what="removing a bad push")
        raise DeviceError(
            f"{path.name} arrived damaged or could not be put in place on Android device {serial} "
            f"({remote}): its sha256 on the device does not match, or the rename failed. Check free space "
            f"(`adb -s {serial} shell df -h /data`) and the cable, then rerun.\n{exc}"
        ) from None
