"""The ssh device's pure parts: the host spelling, ssh's failures named with their fix, the host's facts, the runner's
kind, and an emulated CPU told from a real one. The end-to-end tests against a real sshd are ``test_ssh.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.runners.qemu import parse_probe
from pytest_sme2.runners.ssh import HostFacts, SshHost, binary_kind, connection_error, emulated_cpu

pytestmark = pytest.mark.fast

#: The runner's --probe under qemu-aarch64 11.1.3 -cpu max (recorded here; one CPU block of QEMU's /proc/cpuinfo).
QEMU_MAX_PROBE = """\
sme2_runner probe: arch=aarch64 hwcap=0xb01feffffffb hwcap2=0x7fffbff47fc77fff sve_vl_bytes=64 sme_vl_bytes=32
sme2_runner cpuinfo-begin
processor\t: 0
model name\t: ARMv8 Processor rev 0 (v8l)
BogoMIPS\t: 100.00
Features\t: fp asimd sve asimddp i8mm bf16 sve2 sme sme2
CPU implementer\t: 0x00
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0x051
CPU revision\t: 0

sme2_runner cpuinfo-end
"""


@pytest.mark.parametrize(("text", "user", "host", "port"), [
    ("ci@graviton4.lab", "ci", "graviton4.lab", None),
    ("root@127.0.0.1:2222", "root", "127.0.0.1", 2222),
    ("lab-board-02", "", "lab-board-02", None),
    ("me@[::1]:2200", "me", "::1", 2200),
])
def test_host_spellings(text: str, user: str, host: str, port: int | None) -> None:
    parsed = SshHost.parse(text)
    assert (parsed.user, parsed.host, parsed.port) == (user, host, port)
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["", "a b", "user@host:99999", "user@host:port", "@host"])
def test_a_bad_host_says_how_to_spell_one(text: str) -> None:
    with pytest.raises(ConfigError, match="is not an ssh host: use user@host"):
        SshHost.parse(text)


@pytest.mark.parametrize(("stderr", "fix"), [
    ("ssh: connect to host 10.0.0.9 port 22: Connection refused", "unreachable"),
    ("ssh: connect to host 10.0.0.9 port 22: Connection timed out", "unreachable"),
    ("ssh: Could not resolve hostname nowhere: Name or service not known", "does not resolve"),
    ("ci@10.0.0.9: Permission denied (publickey).", "add your public key to ~/.ssh/authorized_keys"),
    ("No ED25519 host key is known for [10.0.0.9]:22 and you have requested strict checking.\n"
     "Host key verification failed.", "host key is not in your known_hosts"),
])
def test_ssh_failures_are_named_with_their_fix(stderr: str, fix: str) -> None:
    host = SshHost.parse("ci@10.0.0.9")
    message = str(connection_error(host, stderr, "connecting"))
    assert message.startswith("ssh host ci@10.0.0.9: connecting failed: ") and fix in message, message
    assert stderr.splitlines()[-1].strip() in message  # ssh's own words are kept


def test_host_facts_of_a_linux_and_a_mac_host() -> None:
    linux = HostFacts.parse("@@uname\nLinux aarch64\n@@home\n/home/ci\n@@ncpu\n8\n@@cpus\n0 1800000 446\n"
                            "4 3000000 1024\n@@sysctl\n@@tools\ntaskset\ntimeout\nsha256sum\ntar\n@@hostname\nboard\n"
                            "@@uid\n1000\n@@governor\nschedutil\nperformance\n")
    assert (linux.system, linux.machine, linux.home, linux.logical_cpus) == ("Linux", "aarch64", "/home/ci", 8)
    assert linux.max_khz == {0: 1800000, 4: 3000000} and linux.capacity == {0: 446, 4: 1024}
    assert linux.arm64 and not linux.darwin and linux.tools >= {"taskset", "sha256sum"}
    assert (linux.hostname, linux.uid, linux.governor) == ("board", "1000", "performance/schedutil")
    mac = HostFacts.parse("@@uname\nDarwin arm64\n@@home\n/Users/ci\n@@ncpu\n10\n@@cpus\n@@sysctl\n"
                          "hw.optional.arm.FEAT_SME2: 1\n@@tools\nshasum\ntar\n")
    assert mac.darwin and mac.arm64 and mac.logical_cpus == 10 and "FEAT_SME2: 1" in mac.sysctl


def test_the_runners_kind_is_read_from_its_header(tmp_path: Path) -> None:
    elf = bytearray(64)
    elf[:6] = b"\x7fELF\x02\x01"
    elf[18:20] = (183).to_bytes(2, "little")
    (tmp_path / "aarch64").write_bytes(bytes(elf))
    elf[18:20] = (62).to_bytes(2, "little")
    (tmp_path / "x86").write_bytes(bytes(elf))
    (tmp_path / "mac").write_bytes(b"\xcf\xfa\xed\xfe" + (0x0100000C).to_bytes(4, "little") + bytes(24))
    (tmp_path / "script").write_bytes(b"#!/bin/sh\n")
    elf[18:20] = (183).to_bytes(2, "little")
    (tmp_path / "ndk").write_bytes(bytes(elf) + b"/system/bin/linker64\0")
    kinds = {p.name: binary_kind(p) for p in tmp_path.iterdir()}
    assert kinds == {"aarch64": "linux-aarch64", "x86": "ELF machine 62", "mac": "darwin-arm64",
                     "script": "not a binary", "ndk": "android-aarch64"}


def test_a_mixed_pools_entries_are_made_without_the_other_devices_options(tmp_path: Path) -> None:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.pool import PoolEntry
    from pytest_sme2.runners.registry import check_options, resolve

    session = Sme2Options(pool=("adb", "ssh"), ssh_hosts=("ci@board",), ssh_config=tmp_path / "ssh_config",
                          runner_libs=tmp_path / "libs", serial=None)
    phone = PoolEntry(name="EmuPhone", source="adb", address="R5CX", device="android",
                      options={"serial": "R5CX"}).runner_options(session)
    host = PoolEntry(name="board", source="ssh", address="ci@board", device="ssh",
                     options={"ssh_host": "ci@board", "ssh_config": str(tmp_path / "ssh_config")}
                     ).runner_options(session)
    assert (phone.device, phone.serial, phone.ssh_config, phone.runner_libs) == ("android", "R5CX", None,
                                                                                  tmp_path / "libs")
    assert (host.device, host.ssh_host, host.runner_libs, host.serial) == ("ssh", "ci@board", None, None)
    check_options(resolve(host))  # nothing of the phones' left to refuse


def test_a_cpu_of_implementer_0x00_is_emulated_a_vendors_is_not() -> None:
    probe = parse_probe(QEMU_MAX_PROBE)
    assert probe is not None and probe.sme2 and probe.sme_vl_bytes == 32
    said = emulated_cpu(probe)
    assert "implementer 0x00" in said and "SVL 256 bit" in said and "SME2 yes" in said
    real = parse_probe(QEMU_MAX_PROBE.replace("CPU implementer\t: 0x00", "CPU implementer\t: 0x41"))
    assert real is not None and emulated_cpu(real) == ""
