"""The pool's ``ssh`` source (:mod:`pytest_sme2.runners.pool`): the hosts of ``--sme2-ssh-hosts``, each read as the ssh
device reads it, and whether a host still answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.runners.pool import Discovery, LeftOut, PoolEntry
from pytest_sme2.runners.ssh.facts import binary_kind
from pytest_sme2.runners.ssh.link import SshHost, SshLink, config_path
from pytest_sme2.runners.ssh.runner import SshRunner, own_runner

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options


def discover(options: Sme2Options, progress: Callable[[str], None]) -> Discovery:
    """The pool's ``ssh`` source (:mod:`pytest_sme2.runners.pool`): every host of ``--sme2-ssh-hosts`` (ini
    ``sme2_ssh_hosts``, one per line) that answers and is an Arm host our runner runs on, read as the ssh device reads
    it (the runner pushed and probed: its SME2, SVL and identity); the others are left out with their fix."""
    if not options.ssh_hosts:
        raise ConfigError("--sme2-pool=ssh needs the hosts: --sme2-ssh-hosts user@host[:port],... or, in the ini "
                          "file, sme2_ssh_hosts with one host per line (docs/lab.md)")
    # A pool of phones and hosts: --sme2-runner is the phones' Android build, so the hosts run pytest-sme2's own.
    android = options.runner is not None and binary_kind(options.runner) == "android-aarch64"
    if android:
        options = replace(options, runner=None)
    runner = own_runner(options, options.cache_dir / "runners", progress)
    entries: list[PoolEntry] = []
    left: list[LeftOut] = []
    for text in options.ssh_hosts:
        progress(f"reading ssh host {text}")
        try:
            ssh = SshRunner(host=text, config=options.ssh_config, **runner)
            try:
                entry = entry_of(ssh, text, options.ssh_config)
                entries.append(replace(entry, options={**entry.options, "runner": None}) if android else entry)
            finally:
                ssh.close()
        except Sme2Error as exc:
            left.append(LeftOut("ssh", text, str(exc)))
    return Discovery(tuple(entries), tuple(left))


def entry_of(ssh: SshRunner, text: str, config: Path | None) -> PoolEntry:
    """The pool entry of ``ssh``'s host, named by the host and port as the user wrote them (stable across sessions)."""
    info = ssh.device_info()
    identity = info.identity()
    facts = ssh.facts
    sme_bytes = int(info.extra.get("probe", {}).get("sme_vl_bytes", 0))
    options: dict[str, Any] = {"ssh_host": text, **({"ssh_config": str(config)} if config else {})}
    return PoolEntry(
        name=str(replace(ssh.host, user="")), source="ssh", address=str(ssh.host), device="ssh", options=options,
        model=facts.hostname or str(ssh.host), soc=identity.cpu_name,
        clusters=tuple(c.describe() for c in identity.clusters), sme2=info.sme2,
        svl_bits=sme_bytes * 8 if sme_bytes > 0 else None, rooted=facts.uid == "0" if facts.uid else None,
        governor=facts.governor, emulated=identity.emulator, identity=identity.to_dict(),
    )


def alive(entry: PoolEntry) -> str:
    """"" when ``entry``'s host still runs a command over ssh, else what became of it (the pool's liveness check)."""
    link = SshLink(SshHost.parse(str(entry.options["ssh_host"])), config=config_path(entry.options.get("ssh_config")))
    try:
        link.run("true", what="checking that the host still answers", timeout=30.0)
    except Sme2Error as exc:
        return str(exc)
    finally:
        link.close()
    return ""
