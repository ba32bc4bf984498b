"""Device identity from the texts the OS prints: what tells two CPUs apart, and what must not.

The inputs are the files in tests/data/device (see its README for which are recorded and which are
written from published facts). Expected values are the facts stated there — family 25 model 1 vs
model 17, the Zen 4 trace machine's manifest, the phone profiles' core types — not the parser's
own output read back.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from recorded import DATA
from standin import make_standin

from pytest_sme2.device.facts import (
    DeviceInfo,
    darwin_identity,
    device_info_from_facts,
    host_device,
    host_identity,
    linux_identity,
    read_cpufreq,
)
from pytest_sme2.device.identity import X86_ISA, CoreGroup, DeviceIdentity, explain_difference, identity_differences
from pytest_sme2.errors import ConfigError, DeviceError, RunnerError
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.runners.local import LocalRunner

pytestmark = pytest.mark.fast

DEVICE = DATA / "device"
ZEN3 = (DEVICE / "cpuinfo_zen3_epyc_2cpu.txt").read_text()
ZEN4 = (DEVICE / "cpuinfo_zen4_epyc_2cpu.txt").read_text()
SME2_PHONE = (DEVICE / "android_facts_sme2_phone.txt").read_text()
NOSME_PHONE = (DEVICE / "android_facts_nosme_phone.txt").read_text()
M4 = (DEVICE / "sysctl_apple_m4.txt").read_text()
#: The manifest of a trace recorded on the Zen 4 machine (tests/data/TRACES_README.md).
ZEN4_MANIFEST = json.loads((DATA / "toy_cnn_fp16_xnnpack_simd-on_t1.json").read_text())


def _x86(text: str, cpus: int = 2) -> DeviceIdentity:
    return linux_identity(text, arch="x86_64", logical_cpus=cpus)


# ------------------------------------------------------------------------------------------ x86


def test_zen3_and_zen4_have_the_identities_the_facts_say() -> None:
    zen3, zen4 = _x86(ZEN3), _x86(ZEN4)
    assert (zen3.vendor, zen3.cpu_name, zen3.family, zen3.model, zen3.stepping) == ("AuthenticAMD", "AMD EPYC",
                                                                                     25, 1, 1)
    assert (zen4.vendor, zen4.cpu_name, zen4.family, zen4.model, zen4.stepping) == ("AuthenticAMD", "AMD EPYC",
                                                                                     25, 17, 1)
    assert {"avx2", "fma", "f16c"} <= set(zen3.isa) and not any(f.startswith("avx512") for f in zen3.isa)
    assert {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= set(zen4.isa)
    # The Zen 4 text agrees with what the trace machine itself reported.
    assert [zen4.family, zen4.model, zen4.stepping] == ZEN4_MANIFEST["cpu_family_model_stepping"]
    assert set(zen4.isa) == set(ZEN4_MANIFEST["cpu_isa_flags"]) & set(X86_ISA)


def test_zen3_and_zen4_are_different_devices_and_the_message_says_why() -> None:
    zen3, zen4 = _x86(ZEN3), _x86(ZEN4)
    assert zen3 != zen4 and zen3.id != zen4.id
    # Today's fingerprint facts (model name, cores, arch) are the same on both: that was the bug.
    assert (zen3.cpu_name, zen3.logical_cpus, zen3.arch) == (zen4.cpu_name, zen4.logical_cpus, zen4.arch)
    why = explain_difference(zen3, zen4)
    assert why.startswith("CPU model 1 != 17: another CPU generation (this device adds avx512f ")
    assert "avx512_vnni" in why and "lacks" not in why
    back = identity_differences(zen4, zen3)
    assert back[0].startswith("CPU model 17 != 1: another CPU generation (this device lacks avx512f")
    assert len(back) == 1


def test_one_line_description() -> None:
    assert _x86(ZEN4).describe() == (
        "AMD EPYC family 25 model 17 stepping 1 "
        "(x86_64, 2 CPUs; avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16)"
    )
    assert _x86(ZEN3).describe() == "AMD EPYC family 25 model 1 stepping 1 (x86_64, 2 CPUs; avx2 fma f16c)"


def test_clock_and_unrelated_flags_do_not_change_the_identity() -> None:
    base = _x86(ZEN4)
    hotter = re.sub(r"cpu MHz\t\t: .*", "cpu MHz\t\t: 1500.000", ZEN4)
    hotter = re.sub(r"bogomips\t: .*", "bogomips\t: 3000.00", hotter)
    hotter = hotter.replace("microcode\t: 0xa101148", "microcode\t: 0xa101154")
    # A kernel update that names a new mitigation or an unrelated flag is not another CPU.
    hotter = hotter.replace(" fsrm\n", " fsrm user_shstk\n").replace("bugs\t\t: ", "bugs\t\t: retbleed ")
    assert hotter != ZEN4
    same = _x86(hotter)
    assert same == base and same.id == base.id and explain_difference(base, same) == ""


def test_stepping_cpu_count_and_os_each_count() -> None:
    base = _x86(ZEN4)
    stepped = _x86(ZEN4.replace("stepping\t: 1", "stepping\t: 2"))
    assert identity_differences(base, stepped) == ("CPU stepping 1 != 2: another revision of the same CPU",)
    assert identity_differences(base, _x86(ZEN4, cpus=4)) == ("logical CPUs 2 != 4",)
    other_os = linux_identity(ZEN4, os_kind="android", arch="x86_64", logical_cpus=2)
    assert identity_differences(base, other_os) == ("OS linux != android",)


def test_to_dict_round_trips_sorted_and_json_plain() -> None:
    for identity in (_x86(ZEN4), device_info_from_facts("s", SME2_PHONE).identity(), darwin_identity(M4, arch="arm64")):
        d = identity.to_dict()
        assert list(d) == sorted(d)
        assert json.loads(json.dumps(d)) == d
        assert DeviceIdentity.from_dict(d) == identity
        assert DeviceIdentity.from_dict(json.loads(json.dumps(d))).id == identity.id
        assert re.fullmatch(r"[0-9a-f]{12}", identity.id)


def test_a_fingerprint_is_not_an_identity() -> None:
    """A pre-identity record (today's fingerprint) is refused with what is missing, never half-read."""
    old = {"device_kind": "host", "arch": "x86_64", "cpu_model": "AMD EPYC", "cores": 2, "sme2": False}
    with pytest.raises(DeviceError, match=r"no version, os, logical_cpus, isa .*before device identities"):
        DeviceIdentity.from_dict(old)


def test_identity_format_version_is_part_of_it() -> None:
    d = _x86(ZEN4).to_dict()
    newer = DeviceIdentity.from_dict({**d, "version": 2})
    assert newer != _x86(ZEN4)
    assert identity_differences(_x86(ZEN4), newer)[0].startswith("identity format 1 != 2")


# ------------------------------------------------------------------------------------ Arm phones


def test_phone_clusters_carry_the_core_types() -> None:
    sme2 = device_info_from_facts("EMU1", SME2_PHONE).identity()
    assert (sme2.os, sme2.arch, sme2.abi, sme2.logical_cpus) == ("android", "aarch64", "arm64-v8a", 8)
    assert (sme2.product, sme2.soc, sme2.sdk) == ("EmuPhone SME2", "Mediatek MT6993", "36")
    # C1-Pro x4 2.7 GHz, C1-Premium x3 3.5 GHz, C1-Ultra x1 4.21 GHz (MIDR 0x410FD8C0: part 0xd8c, r0p0).
    assert sme2.clusters == (
        CoreGroup(4, "0x41", "0xd8b", "0x0", "0", 2_700_000),
        CoreGroup(3, "0x41", "0xd90", "0x0", "0", 3_500_000),
        CoreGroup(1, "0x41", "0xd8c", "0x0", "0", 4_210_000),
    )
    assert {"asimddp", "i8mm", "bf16", "sve", "sve2", "sme", "sme2"} <= set(sme2.isa)
    assert sme2.describe() == (
        "EmuPhone SME2 (Mediatek MT6993, Android SDK 36; aarch64, 8 CPUs: 4x Arm C1-Pro r0p0 2.70 GHz + "
        "3x Arm C1-Premium r0p0 3.50 GHz + 1x Arm C1-Ultra r0p0 4.21 GHz; asimddp i8mm bf16 sve sve2 sme sme2)"
    )
    nosme = device_info_from_facts("EMU2", NOSME_PHONE).identity()
    assert [(c.count, c.part, c.max_khz) for c in nosme.clusters] == [
        (2, "0xd80", 2_265_600), (5, "0xd81", 3_014_400), (1, "0xd82", 3_302_400)]
    assert not {"sme", "sme2"} & set(nosme.isa) and {"sve2", "i8mm"} <= set(nosme.isa)


def test_two_phones_differ_and_the_message_names_cores_and_sme2() -> None:
    sme2 = device_info_from_facts("EMU1", SME2_PHONE).identity()
    nosme = device_info_from_facts("EMU2", NOSME_PHONE).identity()
    why = identity_differences(sme2, nosme)
    assert why[0].startswith("cores 4x Arm C1-Pro r0p0 2.70 GHz + ")
    assert why[0].endswith("other core types or clocks (this device lacks sme sme2)")
    assert "SoC Mediatek MT6993 != QTI SM8650" in why and "Android SDK 36 != 35" in why


def test_same_phone_hot_or_at_another_battery_level_is_the_same_device() -> None:
    hot = SME2_PHONE.replace("Thermal Status: 0", "Thermal Status: 3").replace("mValue=45.3", "mValue=71.9")
    hot = hot.replace("level: 87", "level: 12").replace("temperature: 312", "temperature: 455")
    assert hot != SME2_PHONE
    cool_info, hot_info = device_info_from_facts("EMU1", SME2_PHONE), device_info_from_facts("EMU1", hot)
    assert (cool_info.thermal_status, hot_info.thermal_status) == (0, 3)
    assert hot_info.identity() == cool_info.identity()
    # Another unit of the same phone model: another serial, same identity.
    assert device_info_from_facts("OTHER", SME2_PHONE).identity() == cool_info.identity()


def test_another_core_revision_or_clock_is_another_device() -> None:
    # The C1-Ultra block is the last processor; a newer revision of it (r0p1) is another CPU.
    head, _, last = SME2_PHONE.partition("processor\t: 7\n")
    revised = head + "processor\t: 7\n" + last.replace("CPU revision\t: 0", "CPU revision\t: 1", 1)
    a = device_info_from_facts("EMU1", SME2_PHONE).identity()
    b = device_info_from_facts("EMU1", revised).identity()
    assert a != b
    assert identity_differences(a, b) == (
        f"cores {' + '.join(c.describe() for c in a.clusters)} != {' + '.join(c.describe() for c in b.clusters)}: "
        "other core types or clocks",)
    assert b.clusters[-1].core_name == "Arm C1-Ultra r0p1"
    slower = SME2_PHONE.replace("7 4210000 1024", "7 3900000 1024")
    assert device_info_from_facts("EMU1", slower).identity().clusters[-1].max_khz == 3_900_000


def test_an_offline_core_reads_as_unknown_not_as_another_core_type() -> None:
    """/proc/cpuinfo lists online CPUs only: a big core parked by the kernel has no block (a known limit)."""
    head, _, _ = SME2_PHONE.partition("processor\t: 7\n")
    parked = head + SME2_PHONE[SME2_PHONE.index("@@cpus"):]
    ident = device_info_from_facts("EMU1", parked).identity()
    assert ident.clusters[-1] == CoreGroup(1, max_khz=4_210_000)
    assert ident.clusters[-1].describe() == "1x unknown core 4.21 GHz"
    assert ident.clusters[:2] == device_info_from_facts("EMU1", SME2_PHONE).identity().clusters[:2]


def test_phone_fingerprint_is_unchanged_by_the_identity() -> None:
    fp = device_info_from_facts("EMU1", SME2_PHONE).fingerprint()
    assert set(fp) == {"device_kind", "arch", "cpu_model", "cores", "sme2", "model", "soc", "abi", "sdk",
                       "cpu_parts", "clusters"}


# ---------------------------------------------------------------------------------------- macOS


def test_apple_m4_identity_from_sysctl() -> None:
    m4 = darwin_identity(M4, arch="arm64")
    assert (m4.os, m4.vendor, m4.cpu_name, m4.family, m4.logical_cpus) == ("darwin", "Apple", "Apple M4",
                                                                           0x6F5129AC, 10)
    assert [(c.count, c.part) for c in m4.clusters] == [(6, "Efficiency"), (4, "Performance")]
    assert {"asimddp", "i8mm", "bf16", "sme", "sme2"} <= set(m4.isa)
    assert "sve" not in m4.isa  # FEAT_SVE: 0 (streaming SVE only)
    assert m4.describe() == ("Apple M4 cpufamily 0x6f5129ac (arm64, 10 CPUs: 6x Apple Efficiency + "
                             "4x Apple Performance; asimddp i8mm bf16 sme sme2)")
    no_sme = darwin_identity(re.sub(r"FEAT_SME(2?): 1", r"FEAT_SME\1: 0", M4), arch="arm64")
    assert identity_differences(m4, no_sme) == ("ISA features differ: this device lacks sme sme2",)


# ----------------------------------------------------------------------------------- this host


def test_host_identity_reads_this_machine() -> None:
    ident = host_identity()
    assert ident == host_device().identity() and ident.logical_cpus == os.cpu_count()
    assert ident.arch == platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if platform.system() != "Linux" or not cpuinfo.exists() or "vendor_id" not in cpuinfo.read_text():
        pytest.skip("the /proc/cpuinfo checks below are for x86 Linux hosts")
    text = cpuinfo.read_text()
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    assert set(ident.isa) == flags & set(X86_ISA)
    assert ident.model == int(re.search(r"^model\s*:\s*(\d+)$", text, re.MULTILINE).group(1))  # type: ignore[union-attr]


def test_a_hand_made_device_info_still_has_an_identity() -> None:
    info = DeviceInfo(kind="android", name="x", arch="aarch64", cpu_name="X", logical_cpus=8,
                      features=("asimd", "sme2", "evtstrm"), soc="S", product="M", sdk="35", abi="arm64-v8a")
    ident = info.identity()
    assert (ident.os, ident.isa, ident.product, ident.logical_cpus) == ("android", ("asimd", "sme2"), "M", 8)


# -------------------------------------------------------------------------------------- runners


def test_local_runner_identity_and_build_identity() -> None:
    runner = LocalRunner()
    assert runner.identity() == host_identity().to_dict()
    assert not {"runner", "executorch_version", "torch_version"} & set(runner.identity())
    build = runner.build_identity(None)
    assert build["executorch_version"] == version("executorch")
    import executorch

    package = Path(next(iter(executorch.__path__)))  # a namespace package: no __file__
    module = next((package / "extension" / "pybindings").glob(build["runtime_module"].rsplit(".", 1)[1] + ".*"))
    assert build["runtime_sha256"] == hashlib.sha256(module.read_bytes()).hexdigest()
    libs = sorted(p for p in (package / "lib").iterdir() if ".so" in p.name)
    listing = "".join(f"{p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in libs)
    assert build["runtime_libs_sha256"] == hashlib.sha256(listing.encode()).hexdigest()
    with pytest.raises(ConfigError, match="one build"):
        runner.build_identity("sme2_off")


def test_host_runner_identity_and_build_identity(tmp_path: Path) -> None:
    on = make_standin(tmp_path / "on", trace=DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump")
    off = make_standin(tmp_path / "off", trace=DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump")
    runner = HostRunner(variants={"sme2_on": on, "sme2_off": off})
    assert runner.identity() == host_identity().to_dict()
    assert runner.build_identity("sme2_on") == {"runner": "executor_runner",
                                                "runner_sha256": hashlib.sha256(on.read_bytes()).hexdigest()}
    off_sha = runner.build_identity("sme2_off")["runner_sha256"]
    assert off_sha == hashlib.sha256(off.read_bytes()).hexdigest() != runner.build_identity("sme2_on")["runner_sha256"]
    # The old fingerprint keeps working, unchanged.
    assert set(runner.fingerprint()["runner_sha256"]) == {"sme2_on", "sme2_off"}
    on.unlink()
    with pytest.raises(RunnerError, match="executor_runner not found"):
        runner.build_identity("sme2_on")


def test_read_cpufreq_reads_a_sysfs_tree(tmp_path: Path) -> None:
    for cpu, khz, cap in ((0, "2265600", "390"), (1, "2265600", "390"), (7, "3302400", "1024")):
        freq = tmp_path / f"cpu{cpu}" / "cpufreq"
        freq.mkdir(parents=True)
        (freq / "cpuinfo_max_freq").write_text(khz + "\n")
        (tmp_path / f"cpu{cpu}" / "cpu_capacity").write_text(cap + "\n")
    (tmp_path / "cpu2").mkdir()  # no cpufreq (a VM, or a driver that is not loaded)
    (tmp_path / "cpufreq").mkdir()  # the policy directory is not a CPU
    assert read_cpufreq(tmp_path) == ({0: 2_265_600, 1: 2_265_600, 7: 3_302_400}, {0: 390, 1: 390, 7: 1024})


def test_across_architectures_the_message_stays_short() -> None:
    phone = device_info_from_facts("EMU1", SME2_PHONE).identity()
    assert identity_differences(_x86(ZEN4), phone) == (
        "OS linux != android", "architecture x86_64 != aarch64", "ABI - != arm64-v8a",
        "CPU vendor AuthenticAMD != -: another CPU maker", "CPU family 25 != -: another CPU line",
        "SoC - != Mediatek MT6993", "model - != EmuPhone SME2", "CPU name 'AMD EPYC' != '-'",
        "logical CPUs 2 != 8", "Android SDK - != 36")


def test_short_names_and_differences_of_the_committed_baselines_identities() -> None:
    """What the once-per-session line says of another device: a few words, not the identity's dict."""
    from pytest_sme2.device.identity import short_differences, short_name

    root = Path(__file__).resolve().parents[2] / ".sme2_baselines"
    zen3, zen4 = (json.loads((root / f"example_models_test_toy_cnn.py_test_latency_fp32-portable--8fe1e3d5c8@{i}.json")
                             .read_text())["identity"] for i in ("1d4c0669c20d", "abc88a945309"))
    emulated = next(root.glob("example_models_test_toy_cnn.py_test_sme2_speedup--*.json"))
    qemu = json.loads(emulated.read_text())["identity"]
    assert short_name(zen3) == "AMD EPYC family 25 model 1"
    assert re.fullmatch(r"QEMU 11\.1\.\d+ on AuthenticAMD family 25 model 17", short_name(qemu))
    assert short_name({"os": "android", "product": "Pixel 9", "soc": "Tensor G4"}) == "Pixel 9 (Tensor G4)"
    # Zen 3 -> Zen 4 adds 10 AVX-512 features (avx512f cd dq bw vl ifma vbmi vbmi2 vnni bf16)
    assert short_differences(zen3, zen4) == "isa: 10 features differ; model 1 != 17"
    assert short_differences(zen4, qemu) == ("arch x86_64 != aarch64; backend portable != xnnpack; emulated != real "
                                             "hardware; runner local != qemu; variant - != sme2_on")
    assert short_differences(zen4, {**zen4, "threads": 2}) == "threads 1 != 2"
