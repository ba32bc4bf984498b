"""Files on the host by content: a *bundle* per content under ``<home>/.cache/pytest-sme2/ssh/<sha256[:16]>/``, pushed
by one tar stream into a private ``.part`` directory, checked with the host's own sha256 tool, marked complete and
renamed into place; only missing bundles are pushed.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import IO

from pytest_sme2.errors import ConfigError, DeviceError, RunnerError
from pytest_sme2.runners.ssh.link import SHORT_S, SshLink
from pytest_sme2.store.files import file_sha256

#: Where bundles live on the host, under the login's home.
REMOTE_DIR = ".cache/pytest-sme2/ssh"
#: The manifest a bundle carries (``sha256sum -c`` format), checked on the host before the bundle is put in place.
MANIFEST = ".sha256sums"
#: The marker a complete bundle holds: its digest.
COMPLETE = ".complete"


@dataclass(frozen=True)
class Bundle:
    """Files that live in one directory on the host, named by the digest of their names and contents."""

    files: Mapping[str, Path]

    @property
    def hashes(self) -> dict[str, str]:
        return {name: file_sha256(path) for name, path in sorted(self.files.items())}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.hashes, sort_keys=True).encode()).hexdigest()


def bundle_dir(root: str, bundle: Bundle) -> str:
    return f"{root}/{bundle.digest[:16]}"


def deploy(link: SshLink, bundles: Sequence[Bundle], *, root: str, darwin: bool, run_id: str) -> list[str]:
    """Make every bundle present under ``root`` on the host; push only the missing ones. Returns the pushed ones'
    directories."""
    checks = [f"[ \"$(cat {quote(bundle_dir(root, b) + '/' + COMPLETE)} 2>/dev/null)\" = {quote(b.digest)} ] "
              "&& echo present || echo absent" for b in bundles]
    answer = link.run("; ".join(checks), what="checking which files are already there").stdout.decode().split()
    if len(answer) != len(bundles):
        raise DeviceError(f"ssh host {link.host} answered {' '.join(answer)[:200]!r} when asked which files it "
                          "holds; rerun, and report this if it persists")
    missing = [b for b, state in zip(bundles, answer, strict=True) if state != "present"]
    for bundle in missing:
        push(link, bundle, root=root, darwin=darwin, run_id=run_id)
    return [bundle_dir(root, b) for b in missing]


def push(link: SshLink, bundle: Bundle, *, root: str, darwin: bool, run_id: str) -> None:
    """One tar stream into a private directory, checked with the host's sha256 tool, marked, renamed into place."""
    final = bundle_dir(root, bundle)
    part = f"{final}.{run_id}.part"
    manifest = "".join(f"{digest}  {name}\n" for name, digest in bundle.hashes.items()).encode()

    def write(stream: IO[bytes]) -> None:
        with tarfile.open(fileobj=stream, mode="w|", dereference=True) as tar:
            for name, path in sorted(bundle.files.items()):
                try:
                    tar.add(str(path), arcname=name, recursive=False)
                except OSError as exc:
                    raise ConfigError(f"cannot read {path} to push it to ssh host {link.host}: "
                                      f"{exc.strerror}") from None
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))

    check = f"shasum -a 256 -c --status {MANIFEST}" if darwin else f"sha256sum -c --quiet --strict {MANIFEST}"
    # mv -T (GNU) refuses to move into a directory another session completed meanwhile; BSD mv has no -T.
    place = (f"{{ [ -e {quote(final)} ] || mv {quote(part)} {quote(final)}; }}" if darwin
             else f"{{ mv -T {quote(part)} {quote(final)} 2>/dev/null || true; }}")
    command = (f"set -e; mkdir -p {quote(root)}; rm -rf {quote(part)}; mkdir {quote(part)}; "
               f"tar -xf - -C {quote(part)}; cd {quote(part)}; {check}; "
               f"printf '%s' {quote(bundle.digest)} > {COMPLETE}; "
               f"cd ..; {place}; rm -rf {quote(part)}")
    size = sum(p.stat().st_size for p in bundle.files.values())
    try:
        link.run(command, what=f"pushing {', '.join(sorted(bundle.files))[:120]}", feed=write,
                 timeout=SHORT_S + size / 1e6)
    except RunnerError as exc:
        link.run(f"rm -rf {quote(part)}", what="removing a failed push", check=False)
        raise DeviceError(f"pushing {size} bytes to ssh host {link.host} ({final}) failed: the files arrived damaged "
                          f"or could not be written (full disk? check `df -h ~` there). Nothing was left "
                          f"half-written.\n{exc}") from None

