"""The emulated Armv9 device: an aarch64 runner under ``qemu-aarch64`` user mode, SME2 on and off.

QEMU (11.1 and newer) emulates SME2 in user mode, and SME on/off is a property of the emulated CPU, not of the
binary: SME2 on is ``-cpu max`` (SVE2, SME, SME2, SME2p1, I8MM, BF16, dotprod), SME2 off the same CPU with
``sme=off`` (SME, SME2, SME2p1 cleared, the rest kept). So one runner binary — pytest-sme2's own, cross-built
against the aarch64 executorch wheel, whose XNNPACK carries KleidiAI's SME2 kernels — runs both arms of an
on/off comparison, and XNNPACK really dispatches SME2 kernels on the first (its operators turn into the packed
``PF32``/``PQS8`` ones) and NEON ones on the second.

What this device can tell: which kernels ran (the trace's operator names; with :mod:`pytest_sme2.evidence.qemu_log`,
QEMU's own log of executed code mapped to the libraries' symbols), whether the two arms compute the same outputs,
the per-operator breakdown *of emulated time*. What it cannot: device time. QEMU translates every instruction;
it runs 150-500x slower than native and emulates SME more slowly than NEON, so an emulated SME2 "speedup" says
nothing about a phone. Its identity carries the emulator (:attr:`~pytest_sme2.device.identity.DeviceIdentity.emulator`),
every report labels its latencies as emulated, and the gate never judges a speedup measured here.

SME2 support is probed, never assumed from a version: the runner's ``--probe`` prints ``AT_HWCAP2`` as the
process under ``-cpu max`` sees it (SME is bit 23, SME2 bit 37) and the ``/proc/cpuinfo`` QEMU emulates.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.device.facts import cpuinfo_features, linux_identity
from pytest_sme2.device.identity import DeviceIdentity
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.evidence.memory import PeakSource
from pytest_sme2.evidence.qemu_counts import CODE_MAP_PREFIX, QEMU_LOG_ITEMS, BlockCounter, counts_of
from pytest_sme2.evidence.qemu_log import (
    ExecutedKernels,
    executed_kernels_of_lines,
    parse_maps,
    read_executed_kernels,
    read_mapped_libraries,
)
from pytest_sme2.program.export import load_pte_check
from pytest_sme2.runners.base import MODE_TRACE, SME2_OFF, SME2_ON, CountedRun, RunRequest, inputs_argv
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.runners.process import kill_group, wait_with_rusage
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext

#: The emulated CPU of each arm. One binary, two CPUs: the on/off comparison by CPU feature.
CPU_SME2_ON = "max"
CPU_SME2_OFF = "max,sme=off"
CPUS: Mapping[str | None, str] = {None: CPU_SME2_ON, SME2_ON: CPU_SME2_ON, SME2_OFF: CPU_SME2_OFF}

#: ``AT_HWCAP2`` bits (Linux arch/arm64/include/uapi/asm/hwcap.h).
HWCAP2_SME = 1 << 23
HWCAP2_SME2 = 1 << 37

#: How to get a QEMU whose user mode emulates SME2 (Debian 12's 7.2 and trixie's 10.0 do not).
QEMU_HINT = (
    "install a QEMU 11.1 or newer user-mode emulator: Debian 12/13: add the trixie-backports suite and "
    "`apt-get install -t trixie-backports qemu-user` (statically linked, nothing else changes); Ubuntu: the "
    "qemu-user package of a release that ships QEMU >= 11.1; macOS: QEMU's user mode does not run on macOS — use "
    "a Linux VM or container. Then pass its qemu-aarch64 with --sme2-qemu PATH if it is not on PATH"
)

_PROBE = re.compile(r"sme2_runner probe: arch=(\S+) hwcap=0x([0-9a-f]+) hwcap2=0x([0-9a-f]+) "
                    r"sve_vl_bytes=(-?\d+) sme_vl_bytes=(-?\d+)")
_VERSION = re.compile(r"version (\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class CpuProbe:
    """What a process sees of the emulated CPU: hwcaps, vector lengths and the emulated ``/proc/cpuinfo``."""

    cpu: str
    hwcap: int
    hwcap2: int
    sve_vl_bytes: int
    sme_vl_bytes: int
    cpuinfo: str

    @property
    def sme(self) -> bool:
        return bool(self.hwcap2 & HWCAP2_SME)

    @property
    def sme2(self) -> bool:
        return bool(self.hwcap2 & HWCAP2_SME2)

    @property
    def features(self) -> frozenset[str]:
        return cpuinfo_features(self.cpuinfo)

    def describe(self) -> str:
        vl = f", SVL {self.sme_vl_bytes * 8} bit" if self.sme_vl_bytes > 0 else ""
        sve = f", SVE {self.sve_vl_bytes * 8} bit" if self.sve_vl_bytes > 0 else ""
        return f"-cpu {self.cpu}{sve}{vl}; SME2 {'yes' if self.sme2 else 'no'}"

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu, "hwcap": hex(self.hwcap), "hwcap2": hex(self.hwcap2),
                "sve_vl_bytes": self.sve_vl_bytes, "sme_vl_bytes": self.sme_vl_bytes, "sme": self.sme,
                "sme2": self.sme2}


def _host_cpu() -> str:
    """The host CPU that runs the emulator: vendor, family and model (``AuthenticAMD family 25 model 17``)."""
    from pytest_sme2.device.facts import host_identity

    host = host_identity()
    parts = [host.vendor or host.cpu_name or host.arch]
    parts += [f"{label} {value}" for label, value in (("family", host.family), ("model", host.model))
              if value is not None]
    return " ".join(parts)


def find_qemu(explicit: Path | None = None) -> Path:
    """``explicit``, else ``qemu-aarch64`` on PATH; a missing one says how to install one that emulates SME2."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"--sme2-qemu {explicit} does not exist; {QEMU_HINT}")
        return explicit
    found = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if found is None:
        raise ConfigError(f"no qemu-aarch64 on PATH for --sme2-device=qemu; {QEMU_HINT}")
    return Path(found)


def qemu_version(qemu: Path) -> str:
    try:
        out = subprocess.run([str(qemu), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"{qemu} does not run ({exc}); {QEMU_HINT}") from None
    m = _VERSION.search(out.stdout)
    if m is None:
        raise ConfigError(f"{qemu} --version printed no QEMU version ({out.stdout.strip()[:80]!r}); {QEMU_HINT}")
    return m.group(1)


def qemu_command(qemu: Path, cpu: str, sysroot: str) -> list[str]:
    """The emulator's part of a command line: QEMU, the CPU, and the sysroot its dynamic loader comes from."""
    return [str(qemu), "-cpu", cpu, *(["-L", sysroot] if sysroot else [])]


def probe_cpu(qemu: Path, runner: Path, cpu: str, sysroot: str, *, timeout_s: float = 60.0) -> CpuProbe:
    """Run ``runner --probe`` under ``-cpu cpu``: the hwcaps and ``/proc/cpuinfo`` its process sees."""
    cmd = [*qemu_command(qemu, cpu, sysroot), str(runner), "--probe"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RunnerError(f"probing the emulated CPU -cpu {cpu} took over {timeout_s:g} s", command=cmd) from None
    except OSError as exc:
        raise RunnerError(f"running {qemu} failed ({exc.strerror or exc}); {QEMU_HINT}", command=cmd) from None
    probe = parse_probe(proc.stdout, cpu)
    if proc.returncode != 0 or probe is None:
        raise RunnerError(
            f"the runner's CPU probe under {qemu} -cpu {cpu} failed: a QEMU that does not know this CPU or cannot "
            f"start the runner (its loader and libc come from -L {sysroot or '(none)'}: install the arm64 cross "
            "sysroot, Debian/Ubuntu libc6-dev-arm64-cross, or pass a statically usable runner)",
            command=cmd, returncode=proc.returncode, stderr_tail=(proc.stderr or proc.stdout)[-2000:],
        )
    return probe


def parse_probe(text: str, cpu: str = "") -> CpuProbe | None:
    """What the runner's ``--probe`` printed (``cpu``: the CPU it ran on, when QEMU's); None when it printed no probe.

    The same output on any Linux: on an Arm host the hwcaps and ``/proc/cpuinfo`` are the kernel's own."""
    m = _PROBE.search(text)
    if m is None:
        return None
    cpuinfo = text.split("sme2_runner cpuinfo-begin\n", 1)[-1].split("sme2_runner cpuinfo-end", 1)[0]
    return CpuProbe(cpu=cpu, hwcap=int(m.group(2), 16), hwcap2=int(m.group(3), 16), sve_vl_bytes=int(m.group(4)),
                    sme_vl_bytes=int(m.group(5)), cpuinfo=cpuinfo)


class QemuRunner(HostRunner):
    """Run ``.pte`` files with one aarch64 runner under QEMU: SME2 on (``-cpu max``) and off (``sme=off``).

    ``runner`` is an aarch64 Linux runner that speaks executor_runner's flags (pytest-sme2's own by default,
    see :func:`pytest_sme2.runners.build.build_runner`); it is both arms' traced build and their timing build
    (without ``--etdump_path`` it attaches no tracer). ``sysroot`` is where QEMU finds the aarch64 loader and
    libc (``-L``; empty on an aarch64 host).
    """

    name = "qemu"
    #: its time is emulated time (profile sources and reports say so)
    emulated = True
    #: QEMU's in_asm log says which kernels executed (:meth:`record_executed`)
    records_executed = True
    #: it counts the instructions a method execution executes (:meth:`record_counts`: QEMU's exec log)
    records_counts = True
    #: the peak wait4 gives is qemu-user's (and so is the runner's own getrusage: the guest asks the host's kernel)
    peak_source = PeakSource.EMULATOR

    def __init__(self, runner: str | Path, *, qemu: Path, sysroot: str = "", timeout_s: float | None = None,
                 write_outputs: bool = True, runtime: Mapping[str, str] | None = None) -> None:
        binary = Path(runner)
        arms = {None: binary, SME2_ON: binary, SME2_OFF: binary}
        super().__init__(binary, variants=arms, timeout_s=timeout_s, timing=arms, write_outputs=write_outputs,
                         runtime=runtime)
        self.qemu = qemu
        self.sysroot = sysroot
        self.version = qemu_version(qemu)

    # ------------------------------------------------------------------------------ the emulated CPU

    @cached_property
    def probes(self) -> dict[str, CpuProbe]:
        """What the runner sees of each arm's CPU; refuses a QEMU whose ``-cpu max`` has no SME2."""
        probes = {cpu: probe_cpu(self.qemu, self.runner_for(None), cpu, self.sysroot)
                  for cpu in dict.fromkeys(CPUS.values())}
        on = probes[CPU_SME2_ON]
        if not on.sme2:
            raise ConfigError(
                f"{self.qemu} (QEMU {self.version}) does not emulate SME2: under -cpu max the runner sees "
                f"AT_HWCAP2={on.hwcap2:#x} (SME {'yes' if on.sme else 'no'}, SME2 no). To fix it, {QEMU_HINT}"
            )
        off = probes[CPU_SME2_OFF]
        if off.sme or off.sme2:
            raise ConfigError(f"QEMU {self.version} still reports SME under -cpu {CPU_SME2_OFF} (AT_HWCAP2="
                              f"{off.hwcap2:#x}): it cannot give an SME2-off arm; use QEMU 11.1 or newer")
        return probes

    def cpu_for(self, variant: str | None) -> str:
        return CPUS[variant]

    def emulator(self, variant: str | None = None) -> str:
        """``qemu-aarch64 11.1.3, -cpu max, SVE 512 bit, SVL 256 bit; SME2 yes; on <host CPU>`` for ``variant``.

        The host is part of it: QEMU translates on the host's CPU, so emulated time depends on it (a Zen 3 and a
        Zen 4 host emulate the same program at different speeds), and a baseline of emulated time belongs to it.
        """
        return f"qemu-aarch64 {self.version}, {self.probes[self.cpu_for(variant)].describe()}; on {_host_cpu()}"

    def identity(self) -> Mapping[str, Any]:
        """The SME2-on CPU as QEMU emulates it: its ``/proc/cpuinfo`` features, and the emulator that gives them."""
        on = self.probes[CPU_SME2_ON]
        cpus = len(re.findall(r"^processor\s*:", on.cpuinfo, re.M)) or 1
        ident = linux_identity(on.cpuinfo, arch="aarch64", logical_cpus=cpus)
        return replace(ident, emulator=self.emulator(None)).to_dict()

    def device_info(self) -> Any:
        """Facts for ``_skip_without_sme2_builds``: the SME2-on CPU reports SME2 (probed)."""
        from pytest_sme2.device.facts import DeviceInfo

        on = self.probes[CPU_SME2_ON]
        return DeviceInfo(kind="qemu", name=f"QEMU {self.version} -cpu {CPU_SME2_ON}", arch="aarch64",
                          cpu_name=f"emulated ({self.emulator(None)})", logical_cpus=1, sme2=on.sme2,
                          features=tuple(sorted(on.features)),
                          device_identity=DeviceIdentity.from_dict(self.identity()))

    def fingerprint(self) -> Mapping[str, Any]:
        return {"system": "Linux", "runner": self.name, "emulated": True, "qemu": str(self.qemu),
                "qemu_version": self.version, "cpus": {v or "default": c for v, c in CPUS.items()},
                "runner_sha256": self.build_hashes()}

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What runs the ``.pte`` for ``variant``: the runner binary, the emulator's version and the arm's CPU."""
        self._check_executable(self.runner_for(variant))
        return {"runner": "sme2_runner (aarch64, under QEMU)", "runner_sha256": file_sha256(self.runner_for(variant)),
                "qemu_version": self.version, "cpu": self.cpu_for(variant), **self.runtime}

    # ------------------------------------------------------------------------------ running

    def command(self, request: RunRequest, runner: Path, trace_path: Path | None) -> list[str]:
        return [*qemu_command(self.qemu, self.cpu_for(request.variant), self.sysroot),
                *super().command(request, runner, trace_path)]

    def record_executed(self, request: RunRequest) -> ExecutedKernels:
        """Run ``request`` (one execution) under QEMU's ``-d in_asm`` log and map the code that ran to the exported
        functions of the libraries the runner mapped (it prints its ``/proc/self/maps``).

        QEMU logs every translated block once: the log proves which kernels executed (SME2 ones marked), not how
        long they took. ~3 MB and well under a second per execution of the example models.
        """
        run_dir = self.new_run_dir(request)
        log = run_dir / f"{request.stem}.in_asm"
        stderr = run_dir / f"{request.stem}.log"
        cmd = [*qemu_command(self.qemu, self.cpu_for(request.variant), self.sysroot), "-d", "in_asm", "-D",
               str(log), *HostRunner.command(self, request, self._binary(request), None)]
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        with stderr.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=run_dir,
                                    start_new_session=True)
            try:
                returncode, _, _ = wait_with_rusage(proc, timeout, tick=self.heartbeat)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise RunnerError(f"the in_asm run under QEMU took over {timeout:g} s", command=cmd) from None
            except BaseException:
                kill_group(proc)  # Ctrl-C must not leave an emulator behind
                raise
        text = stderr.read_text(encoding="utf-8", errors="replace")
        if returncode != 0:
            raise RunnerError(f"the runner under QEMU (-d in_asm) exited with code {returncode} running "
                              f"{request.pte}; the log is {stderr}", command=cmd, returncode=returncode,
                              stderr_tail=text[-2000:])
        maps = [line.split("sme2_runner map: ", 1)[1] for line in text.splitlines() if "sme2_runner map: " in line]
        if not maps:
            raise RunnerError(f"{self.runner_for(request.variant)} printed no 'sme2_runner map:' lines, so the "
                              "addresses QEMU logged cannot be placed in a library: the kernels that ran are known "
                              "only for pytest-sme2's own runner", command=cmd, stderr_tail=text[-2000:])
        return replace(read_executed_kernels(log, maps), source=f"QEMU's in_asm log of one execution, {log}")

    def record_counted(self, request: RunRequest) -> CountedRun:
        """Count the instructions one method execution of ``request`` executes under emulation (not start-up), and
        say which kernels the process ran (the blocks QEMU translated, as :meth:`record_executed` does from its own
        process: one emulated process per arm gives both).

        One process on one thread under ``-d in_asm,exec,nochain``, its log streamed through a pipe into
        :class:`~pytest_sme2.evidence.qemu_counts.BlockCounter`: ``request.warmup`` executions first (the first one
        packs and plans: it executes more), then ``request.runs`` counted ones, which must agree exactly. The runner,
        the program and its inputs are linked into the run directory under fixed names and the process gets an
        empty environment, so its arguments, environment and auxiliary vector — what lies on the emulated stack —
        are the same on every host and checkout.
        """
        runner = self._binary(request)
        self._check_executable(runner)
        load_pte_check(request.pte)
        run_dir = self.new_run_dir(request)
        argv = _stage(run_dir, runner, request)
        stderr = run_dir / f"{request.stem}.count.log"
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        counter = BlockCounter(source=f"QEMU's log of {request.pte.name} (-cpu {self.cpu_for(request.variant)})")
        read_end, write_end = os.pipe()
        cmd = [*qemu_command(self.qemu, self.cpu_for(request.variant), self.sysroot), "-d", QEMU_LOG_ITEMS,
               "-D", f"/dev/fd/{write_end}", *argv]
        with stderr.open("wb") as out, os.fdopen(read_end, "rb", buffering=1 << 20) as log:
            try:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        cwd=run_dir, env={}, pass_fds=(write_end,), start_new_session=True)
            except OSError as exc:
                raise RunnerError(f"running {self.qemu} failed ({exc.strerror or exc}); {QEMU_HINT}",
                                  command=cmd) from None
            finally:
                os.close(write_end)
            watchdog = threading.Timer(timeout, kill_group, (proc,))
            watchdog.start()
            try:
                counter.feed_stream(log, tick=self.heartbeat)
                returncode = proc.wait()
            finally:
                watchdog.cancel()
                kill_group(proc)  # a counter that raised, or Ctrl-C: no emulator left behind
        text = stderr.read_text(encoding="utf-8", errors="replace")
        if returncode != 0:
            what = f"took over {timeout:g} s" if returncode == -9 else f"exited with code {returncode}"
            raise RunnerError(f"the runner under QEMU (-d {QEMU_LOG_ITEMS}) {what} running {request.pte}; its "
                              f"output is {stderr}", command=cmd, returncode=returncode, stderr_tail=text[-2000:])
        maps = [line.split(CODE_MAP_PREFIX, 1)[1] for line in text.splitlines() if CODE_MAP_PREFIX in line]
        cpu = self.cpu_for(request.variant)
        libraries = read_mapped_libraries(parse_maps(maps))  # read once: every count and the kernels place code with it
        counted = [counts_of(counter, maps, libraries, cpu=cpu, qemu_version=self.version, execution=i)
                   for i in range(request.warmup, request.warmup + request.runs)]
        if len(counter.executions) != request.executions or any(c != counted[0] for c in counted):
            totals = [c.total for c in counted]
            raise RunnerError(f"the counted executions of {request.pte} under -cpu {cpu} do not agree "
                              f"({len(counter.executions)} counted of {request.executions}; totals {totals}): "
                              "something other than the program and its inputs decides what it executes",
                              command=cmd)
        # the kernel evidence places code in the runtime's libraries and the runner, as the in_asm run's map lines do
        # (the C library and the loader count as outside them: what they run depends on the process's environment)
        runtime_maps = [m for m in maps if any(name in m for name in KERNEL_MAP_NAMES)]
        executed = executed_kernels_of_lines(counter.blocks, runtime_maps, libraries,
                                             source=f"{counter.source}, the counting process: {request.warmup} "
                                                    f"warm-up + {request.runs} counted "
                                                    f"execution{'s' if request.runs != 1 else ''}")
        return CountedRun(counts=replace(counted[0], executions=request.runs), executed=executed)

    def build_of(self, variant: str | None, build: Path | None = None, mode: str = MODE_TRACE) -> str:
        return f"{super().build_of(variant, build, mode)} under QEMU {self.version} -cpu {self.cpu_for(variant)}"


#: The mappings the kernel evidence names functions in: executorch's libraries and the runner (what
#: ``sme2_runner.cpp``'s ``print_maps`` prints for :meth:`QemuRunner.record_executed`).
KERNEL_MAP_NAMES = ("libexecutorch", "sme2_runner")

#: The fixed names a counted run sees (:meth:`QemuRunner.record_counts`).
STAGED_RUNNER = "sme2_runner"
STAGED_PROGRAM = "model.pte"


def _stage(run_dir: Path, runner: Path, request: RunRequest) -> list[str]:
    """Link the runner, the program and its inputs into ``run_dir`` under fixed names; the command line using them.

    QEMU resolves the runner's link for ``/proc/self/exe``, so its ``$ORIGIN/lib`` RUNPATH still finds the SDK.
    """
    links = {STAGED_RUNNER: runner, STAGED_PROGRAM: request.pte,
             **{f"input_{i}.bin": Path(p) for i, p in enumerate(request.inputs or ())}}
    for name, target in links.items():
        (run_dir / name).symlink_to(target.absolute())
    inputs = [f"input_{i}.bin" for i in range(len(request.inputs or ()))]
    return [f"./{STAGED_RUNNER}", "--model_path", STAGED_PROGRAM, f"--num_executions={request.executions}",
            "--cpu_threads=1", *inputs_argv(inputs, fix="")]


def from_options(options: Sme2Options, context: RunnerContext) -> QemuRunner:
    """The registry's factory (:mod:`pytest_sme2.runners.registry`): ``--sme2-runner`` (an aarch64 Linux runner) or
    pytest-sme2's own, cross-built from the aarch64 executorch wheel, under ``--sme2-qemu`` (default: on PATH)."""
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner

    emulator = find_qemu(options.qemu)  # before a build: a missing QEMU is the first thing to say
    if options.runner is not None:
        from pytest_sme2.runners.build import cross_compiler, cross_sysroot, host_is_aarch64

        sysroot = "" if host_is_aarch64() else cross_sysroot(cross_compiler())
        emulated = QemuRunner(options.runner, qemu=emulator, sysroot=sysroot, timeout_s=options.timeout)
    else:
        build = build_runner(TARGET_LINUX_AARCH64, cache_dir=context.runner_cache, wheel=options.aarch64_wheel,
                             progress=context.progress)
        emulated = QemuRunner(build.path, qemu=emulator, sysroot=build.sysroot, timeout_s=options.timeout,
                              runtime=build.runtime())
    # Probe the emulated CPUs now: a QEMU without SME2 is one usage error for the session, not a failure per test.
    _ = emulated.probes
    return emulated
