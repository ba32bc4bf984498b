"""The pool's ``adb`` source: every phone one adb server reaches, with what each one is.

``adb connect`` each address of ``--sme2-adb-connect`` (a phone over Wi-Fi, a DeviceFarmer/STF device, a remote
device streaming's forwarded port), then read ``adb devices``: every entry in state ``device`` is read (the facts
the Android runner reads, plus the streaming vector length, root and the cpufreq governor) and joins the pool; an
entry in any other state (``unauthorized``, ``offline``) is left out with the fix for that state, and the session goes
on. The adb server is the one the adb CLI uses (``ANDROID_ADB_SERVER_HOST``/``PORT``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import adbutils

from pytest_sme2.device.facts import ANDROID_FACTS_SCRIPT, DeviceInfo, device_info_from_facts
from pytest_sme2.errors import DeviceError, Sme2Error
from pytest_sme2.runners.android.adb import COMMAND_TIMEOUT, AdbLink
from pytest_sme2.runners.android.selection import state_error
from pytest_sme2.runners.pool import Discovery, LeftOut, PoolEntry

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options

#: Seconds ``adb connect`` may take per address.
CONNECT_TIMEOUT = 20.0

#: What the pool reads besides the runner's facts, in one round trip: the default streaming vector length Linux
#: gives a process (bytes; absent without SME), the shell's uid and an ``su`` where rooting tools put it (root; not on
#: the PATH: ``su`` is not run, a Magisk prompt would stop the session), the governors.
POOL_FACTS_SCRIPT = (
    "echo @@svl; cat /proc/sys/abi/sme_default_vector_length 2>/dev/null; "
    "echo @@uid; id -u; "
    "echo @@su; ls /system/bin/su /system/xbin/su /sbin/su /su/bin/su /debug_ramdisk/su 2>/dev/null; "
    "echo @@governor; cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null; "
    "echo @@end"
)


def read_info(link: AdbLink) -> DeviceInfo:
    """The facts of ``link``'s device (one round trip), refusing a device without adb's shell protocol v2."""
    device = link.device()
    features = link.call("reading adb features", device.get_features)
    if "shell_v2" not in features.split(","):
        # Without it adbutils silently falls back to a shell that cannot report exit codes.
        raise DeviceError(
            f"Android device {link.serial} does not offer adb's shell protocol v2 (features: {features or 'none'}), "
            "so runner exit codes cannot be read: it needs Android 7 or later and an up-to-date adb (`adb version`)"
        )
    facts = link.shell(ANDROID_FACTS_SCRIPT, what="reading device facts")
    return device_info_from_facts(link.serial, facts.stdout)


def pool_facts(text: str) -> tuple[int | None, bool | None, str]:
    """(SVL in bits, rooted, governors) from the output of :data:`POOL_FACTS_SCRIPT`.

    Rooted: the shell runs as uid 0 (``adb root``) or an ``su`` binary is where rooting tools install it. None where the
    output says nothing.
    """
    from pytest_sme2.device.facts import facts_sections

    sec = facts_sections(text)
    svl_text = sec.get("svl", "").strip()
    svl = int(svl_text) * 8 if svl_text.isdigit() and int(svl_text) > 0 else None
    uid = sec.get("uid", "").strip()
    rooted = None if not uid.isdigit() else (uid == "0" or bool(sec.get("su", "").strip()))
    governors = sorted({g.strip() for g in sec.get("governor", "").splitlines() if g.strip()})
    return svl, rooted, "/".join(governors)


def entry_of(link: AdbLink) -> PoolEntry:
    """The pool entry of ``link``'s device: its facts, identity and the options that make its runner."""
    info = read_info(link)
    extra = link.shell(POOL_FACTS_SCRIPT, what="reading the vector length, root and governor", check=False)
    svl, rooted, governor = pool_facts(str(extra.stdout))
    identity = info.identity()
    return PoolEntry(
        name=info.product or link.serial, source="adb", address=link.serial, device="android",
        options={"serial": link.serial}, model=info.product, soc=info.soc,
        clusters=tuple(c.describe() for c in identity.clusters), sme2=info.sme2, svl_bits=svl, rooted=rooted,
        governor=governor, emulated=identity.emulator, identity=identity.to_dict(),
    )


def connect(client: adbutils.AdbClient, address: str) -> str:
    """``adb connect address``: "" when connected, else why not and what to do."""
    try:
        answer = client.connect(address, timeout=CONNECT_TIMEOUT)
    except (adbutils.AdbError, OSError, EOFError) as exc:
        answer = f"{type(exc).__name__}: {exc}"
    if answer.startswith(("connected to", "already connected to")):
        return ""
    return (f"`adb connect {address}` said {answer.strip()!r}: check the address and port (an STF device's is shown "
            "on its page, a Wi-Fi phone's under Developer options > Wireless debugging) and that this machine can "
            "reach it, then rerun")


def discover(options: Sme2Options, progress: Callable[[str], None]) -> Discovery:
    """The ``adb`` source (:mod:`pytest_sme2.runners.pool`): connect, list, read each device in state ``device``."""
    client = adbutils.AdbClient(socket_timeout=COMMAND_TIMEOUT)
    left: list[LeftOut] = []
    for address in options.adb_connect:
        progress(f"adb connect {address}")
        why = connect(client, address)
        if why:
            left.append(LeftOut("adb", address, why))
    lister = AdbLink(client, (), None)
    entries = []
    for attached in lister.attached():  # no adb server: the source's DeviceError, said once
        if attached.state != "device":
            left.append(LeftOut("adb", attached.serial, str(state_error(attached.serial, attached.state))))
            continue
        progress(f"reading Android device {attached.serial}")
        try:
            entries.append(entry_of(AdbLink(client, (attached.serial,), None)))
        except Sme2Error as exc:
            left.append(LeftOut("adb", attached.serial, str(exc)))
    return Discovery(tuple(entries), tuple(left))


def alive(entry: PoolEntry) -> str:
    """"" when the adb server still lists ``entry``'s device as ``device`` and it runs a command; else what became of
    it (the pool's liveness check, asked after a test on it failed)."""
    client = adbutils.AdbClient(socket_timeout=CONNECT_TIMEOUT)
    link = AdbLink(client, (entry.address,), None)
    try:
        link.shell("true", what="checking that the device still answers", timeout=CONNECT_TIMEOUT)
    except Sme2Error as exc:
        return str(exc)
    return ""
