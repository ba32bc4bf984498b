"""An Arm Linux host (or a Mac) over ssh: pytest-sme2's runner pushed once per content, run pinned, its trace pulled.

``--sme2-device=ssh --sme2-ssh-host user@host[:port]`` (or a ``Host`` of the user's ssh config: its ``IdentityFile``,
``ProxyJump``, ``Port`` ... apply; ``--sme2-ssh-config FILE`` is ``ssh -F FILE``). The system's OpenSSH client does the
work, not a Python ssh library: it already reads the user's config, agent, keys and known hosts, which is where a lab's
access rules live, and its ``ControlMaster`` gives one authenticated connection for the whole session (each command
after the first costs a channel, not a handshake).

One run: the runner (and its ``lib/`` of shared libraries, the executorch wheel's) and the ``.pte`` and inputs are made
present on the host by content — a *bundle* per content lives at ``<home>/.cache/pytest-sme2/ssh/<sha256[:16]>/``,
written to a private ``.part`` directory by one tar stream, checked with the host's own ``sha256sum``, marked complete
and renamed into place, so concurrent sessions never see half a runner and a second session pushes nothing — then
``timeout ... taskset -c <fastest cluster> <runner> ... </dev/null`` in a fresh run directory, the trace (and outputs)
pulled back by one tar stream, the run directory removed. The trace is read as every other
(:func:`~pytest_sme2.runners.executor_runner.result_from_trace`).

The device's identity is the host's own facts: ``uname``, the CPU count and cpufreq table, and the runner's
``--probe`` (``AT_HWCAP``/``AT_HWCAP2`` and ``/proc/cpuinfo`` as the runner process sees them) on Linux; ``sysctl hw``
(``hw.optional.arm.FEAT_SME2``) on macOS. A CPU whose ``CPU implementer`` is ``0x00`` ("reserved for software use",
which QEMU's ``-cpu max`` reports) is an emulated one: its time is emulated time, labelled so everywhere.

Which runner: pytest-sme2's own, cross-built for ``linux-aarch64`` from the aarch64 executorch wheel, for an aarch64
Linux host; for a Mac, ``--sme2-runner`` a runner built on a Mac (``pytest-sme2 build-runner``: the macOS arm64 wheel
ships the C++ SDK, ``include/`` and ``lib/*.dylib``), pushed with the ``lib/`` beside it. Any other OS or architecture
is refused, naming the host and what it is.

One concern per module, in the order a run uses them:

- :mod:`.link` — the connection (:class:`~.link.SshLink` over ``[user@]host[:port]``, :class:`~.link.SshHost`): one
  master connection, ``BatchMode``; every ssh failure a :class:`~pytest_sme2.errors.DeviceError` naming the host and
  the fix (:func:`~.link.connection_error`).
- :mod:`.facts` — what the host is (:class:`~.facts.HostFacts`, one round trip), what a runner binary is built for
  (:func:`~.facts.binary_kind`), an emulated CPU told from a real one (:func:`~.facts.emulated_cpu`).
- :mod:`.deploy` — files on the host by content (:class:`~.deploy.Bundle`, :func:`~.deploy.deploy`).
- :mod:`.runner` — :class:`SshRunner`, which puts these together, and the registry's factory
  (:func:`~.runner.from_options`).
- :mod:`.source` — the pool's ``ssh`` source (:func:`~.source.discover`, :func:`~.source.alive`).
"""

from __future__ import annotations

from pytest_sme2.runners.ssh.deploy import COMPLETE, MANIFEST, REMOTE_DIR, Bundle, bundle_dir, deploy, push
from pytest_sme2.runners.ssh.facts import FACTS_SCRIPT, HostFacts, binary_kind, emulated_cpu
from pytest_sme2.runners.ssh.link import (
    SHORT_S,
    SSH_FAILED,
    SshHost,
    SshLink,
    config_path,
    connection_error,
    unreachable_fix,
)
from pytest_sme2.runners.ssh.runner import TIMEOUT_EXIT, SshRunner, exit_hint, from_options, own_runner
from pytest_sme2.runners.ssh.source import alive, discover, entry_of

__all__ = [
    "COMPLETE", "FACTS_SCRIPT", "MANIFEST", "REMOTE_DIR", "SHORT_S", "SSH_FAILED", "TIMEOUT_EXIT",
    "Bundle", "HostFacts", "SshHost", "SshLink", "SshRunner", "alive", "binary_kind", "bundle_dir", "config_path",
    "connection_error", "deploy", "discover", "emulated_cpu", "entry_of", "exit_hint", "from_options", "own_runner",
    "push", "unreachable_fix",
]
