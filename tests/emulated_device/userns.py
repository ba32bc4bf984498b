"""Run a command in a new user namespace that maps every uid and gid to itself (standard library only).

``python userns.py ARGV...``: the child unshares its user namespace and waits; this process (root in the parent
namespace) writes the identity maps for it, then the child execs ARGV. Inside, root keeps uid 0 with every
capability of the new namespace (so the sandbox can mount its own ``binfmt_misc`` instance), and uid 2000 is still
uid 2000 (the shell user owns the same files). util-linux's ``unshare --map-users`` needs ``newuidmap`` for this.
Exits with the command's status; a command killed by a signal kills this process with the same signal.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

CLONE_NEWUSER = 0x10000000
IDENTITY_MAP = "0 0 4294967295\n"


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"userns: unshare(CLONE_NEWUSER) failed: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(125)
        os.write(ready_w, b"u")
        os.close(ready_w)
        if os.read(go_r, 1) != b"g":
            os._exit(125)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"userns: cannot run {argv[0]}: {exc}\n".encode())
            os._exit(127)
    os.close(ready_w)
    os.close(go_r)
    if os.read(ready_r, 1) == b"u":
        try:
            for name in ("uid_map", "gid_map"):
                Path(f"/proc/{pid}/{name}").write_text(IDENTITY_MAP)
            os.write(go_w, b"g")
        except OSError as exc:
            sys.stderr.write(f"userns: cannot map ids for the sandbox: {exc}\n")
    os.close(go_w)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
