"""``file_sha256``: remembered per file as it is, so the runtime's libraries are hashed once per process and a file
rewritten or replaced is hashed again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pytest_sme2.store.files import file_sha256

pytestmark = pytest.mark.fast


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_file_is_hashed_once_and_again_when_rewritten_or_replaced(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real_open = Path.open

    def counted_open(self: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if args[:1] == ("rb",):
            reads.append(self.name)
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", counted_open)
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"one")
    link = tmp_path / "libx.so.1"
    link.symlink_to(lib.name)
    assert file_sha256(lib) == file_sha256(str(lib)) == file_sha256(link) == _sha(b"one")
    assert reads == ["libx.so"], "the same file by another name is the same file"

    st = lib.stat()
    lib.write_bytes(b"two")  # same size, rewritten in place
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert file_sha256(lib) == _sha(b"two")

    new = tmp_path / "new.so"
    new.write_bytes(b"thr")
    os.utime(new, ns=(lib.stat().st_atime_ns, lib.stat().st_mtime_ns))  # same size and mtime, another file
    new.replace(lib)
    assert file_sha256(link) == _sha(b"thr")
    assert reads == ["libx.so", "libx.so", "libx.so.1"], "hashed again when rewritten and when replaced"
