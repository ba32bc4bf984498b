"""``--sme2-device=ssh`` against a real OpenSSH server on loopback whose aarch64 programs run under QEMU.

The host (``tests/ssh_server.py``) is Debian's sshd with its own keys and config in the test's temp dir; each command
a client sends runs in a user namespace with a private binfmt_misc that hands aarch64 ELF files to ``qemu-aarch64
-cpu max`` (SME2), as the arm64 emulated phone does. Nothing is replayed: pytest-sme2's runner cross-built from the
aarch64 wheel is pushed over ssh with its libraries, runs there, and its trace is pulled. Expectations are read here
from what ran — the pulled traces (``read_etdump``), the commands the host logged — with this file's own rules, not
pytest_sme2's. Latency under QEMU is emulated time: no test asserts one, and the reports must say so. toy_cnn and one
execution per run keep the tier's time modest.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from plugin.test_lab import RECORDED
from ssh_server import LocalSshHost, SshUnavailable, free_port, start_ssh_host

from pytest_sme2.errors import ConfigError, DeviceError, RunnerError
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.runners.base import MODE_TIMING, RunRequest
from pytest_sme2.runners.build import RunnerBuild
from pytest_sme2.runners.ssh import SshRunner

pytestmark = pytest.mark.emulated_device

REPO = Path(__file__).resolve().parents[2]
#: XNNPACK's GEMM-like operators and its packed-LHS (SME/KleidiAI) types, by their event names (this file's rule).
GEMM = re.compile(r"^(Convolution|Fully Connected) \(")
PACKED = re.compile(r"\((NHWC|NC), P(F32|F16|QS8)\b")
#: What pushes a bundle: one tar stream unpacked on the host.
PUSH = "tar -xf - -C "


def _start(root: Path, qemu: Path, **kwargs: Any) -> LocalSshHost:
    from toolchain import tool_missing

    try:
        return start_ssh_host(root, qemu=qemu, **kwargs)
    except SshUnavailable as exc:
        tool_missing(f"local ssh host unavailable: {exc}")


@pytest.fixture
def ssh_host(tmp_path: Path, sme2_qemu: Path) -> Iterator[LocalSshHost]:
    """A running local ssh host (aarch64 under QEMU -cpu max); stopped at teardown."""
    host = _start(tmp_path / "sshd", sme2_qemu)
    yield host
    host.stop()


@pytest.fixture
def fp32(example_export: Callable[[str, str], Any]) -> Any:
    return example_export("fp32", "xnnpack")


@pytest.fixture
def ssh_runner(ssh_host: LocalSshHost, aarch64_runner_build: RunnerBuild) -> Iterator[Callable[..., SshRunner]]:
    """``ssh_runner(**kwargs)``: an SshRunner of the aarch64 runner on the local host (a new connection each: a new
    session); every one's connection closed at teardown, whatever the test did."""
    made: list[SshRunner] = []

    def make(**kwargs: Any) -> SshRunner:
        made.append(SshRunner(aarch64_runner_build.path, host=ssh_host.address, config=ssh_host.client_config,
                              timeout_s=300.0, runtime=aarch64_runner_build.runtime(), **kwargs))
        return made[-1]

    yield make
    for runner in made:
        runner.close()


def _request(exported: Any, tmp_path: Path, **overrides: Any) -> RunRequest:
    fields: dict[str, Any] = {"pte": exported.pte_path, "runs": 1, "warmup": 0, "threads": 1,
                              "out_dir": tmp_path / "out", "inputs": tuple(exported.input_files), "timeout_s": 300.0}
    return RunRequest(**{**fields, **overrides})


def test_the_runner_is_pushed_once_per_content_across_sessions(ssh_host: LocalSshHost, ssh_runner: Callable[..., Any],
                                                               aarch64_runner_build: RunnerBuild, fp32: Any,
                                                               tmp_path: Path) -> None:
    first = ssh_runner()
    result = first.run(_request(fp32, tmp_path))
    first.close()
    pushes = [c for c in ssh_host.commands if PUSH in c]
    # The runner with the wheel's libraries in one bundle, the .pte, each input: one push each.
    assert len(pushes) == 2 + len(fp32.input_files), pushes
    libs = sorted(p.name for p in (aarch64_runner_build.path.parent / "lib").iterdir() if p.name.endswith(".so"))
    bundles = sorted(p for p in (ssh_host.home / ".cache/pytest-sme2/ssh").iterdir() if p.name != "runs")
    runner_dir = next(b for b in bundles if (b / aarch64_runner_build.path.name).is_file())
    assert sorted(p.name for p in (runner_dir / "lib").iterdir()) == libs
    assert (runner_dir / aarch64_runner_build.path.name).read_bytes() == aarch64_runner_build.path.read_bytes()
    assert not [p for p in bundles if p.name.endswith(".part")]
    assert not list((ssh_host.home / ".cache/pytest-sme2/ssh/runs").iterdir())  # the run directory was removed
    assert result.trace_path is not None and read_etdump(result.trace_path).num_runs == 1
    # A second session (another runner, another connection) finds everything there by content: it pushes nothing.
    second = ssh_runner(untraced=True)
    again = second.run(_request(fp32, tmp_path))
    assert [c for c in ssh_host.commands if PUSH in c] == pushes
    assert again.metadata["pushed"] == []
    # Pinned with taskset, bounded by the host-side timeout, in every run.
    # An untraced run (the runner is its own timing build): no trace, its Iteration lines read instead.
    untraced = second.run(_request(fp32, tmp_path, mode=MODE_TIMING, runs=2))
    assert untraced.trace_path is None and len(untraced.e2e_ms) == 2 and all(ms > 0 for ms in untraced.e2e_ms)
    assert "--etdump_path" not in untraced.metadata["device_command"]
    runs = [c for c in ssh_host.commands if "--model_path" in c]
    assert len(runs) == 3 and all(re.search(r"exec timeout -k 5 300 taskset -c 0 /", c) for c in runs), runs


def test_toy_cnn_profiled_over_ssh(ssh_host: LocalSshHost, aarch64_runner_build: RunnerBuild, fp32: Any,
                                   sme2_shared_cache: Path, tmp_path: Path) -> None:
    # fp32: exported into the shared cache the suite reads (the same .pte it pushes)
    results = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", "example_models/test_toy_cnn.py", "-k", "test_latency and fp32-xnnpack",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", "--sme2-device=ssh",
           f"--sme2-ssh-host={ssh_host.address}", f"--sme2-ssh-config={ssh_host.client_config}",
           f"--sme2-cache-dir={sme2_shared_cache}", f"--sme2-baseline-dir={tmp_path / 'baselines'}",
           f"--sme2-out-dir={tmp_path / 'runs'}", "--sme2-blocks=1", "--sme2-runs=1", "--sme2-warmup=0",
           "--sme2-busy-limit=100", f"--sme2-json={results}", f"--sme2-markdown={tmp_path / 'r.md'}"]
    done = subprocess.run(cmd, cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=900,
                          check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    tests = {t["test_id"].rsplit("::", 1)[-1]: t for t in json.loads(results.read_text())["tests"]}
    assert set(tests) == {"test_latency[fp32-xnnpack]"}, out[-3000:]
    test = tests["test_latency[fp32-xnnpack]"]
    profile = test["profile"]
    # SME2 kernels ran: the pulled trace's GEMM operators are XNNPACK's packed SME ones.
    gemms = [o["name"] for o in profile["analysis"]["operator_details"] if GEMM.match(o["name"])]
    assert gemms and all(PACKED.search(n) for n in gemms), gemms
    assert profile["analysis"]["category_totals_ms"]["Convolution"] > 0
    traces = sorted((tmp_path / "runs").rglob("*.etdump"))
    assert traces and any(PACKED.search(str(n)) for n in read_etdump(traces[0]).operators()["event_name"])
    # The identity is the host's own facts: the CPU QEMU emulates (SME2, implementer 0x00: emulated), its CPU count.
    identity = profile["identity"]
    assert identity["arch"] == "aarch64" and identity["os"] == "linux" and "sme2" in identity["isa"]
    assert "implementer 0x00" in identity["emulator"] and identity["logical_cpus"] == os.cpu_count()
    assert profile["device"]["kind"] == "ssh" and profile["device"]["sme2"] is True
    # Emulated time, labelled as such.
    assert test["emulated"]
    line = next(line for line in done.stdout.splitlines() if "test_latency[fp32-xnnpack]" in line and "median" in line)
    assert "(emulated)" in line
    assert "emulated" in (tmp_path / "r.md").read_text().lower()
    # The runner was probed and every run pinned on the host, through the one session's connections.
    assert any(c.endswith("--probe") for c in ssh_host.commands)
    runs = [c for c in ssh_host.commands if "--model_path" in c]
    assert runs and all("taskset -c 0 " in c for c in runs), runs


#: The host's sha256sum, failing while ``$HOME/damaged`` exists: a push that arrives damaged (a fault of this test's).
DAMAGING_SHA256SUM = '#!/bin/sh\n[ -e "$HOME/damaged" ] && { echo "FAILED: checksum did NOT match" >&2; exit 1; }\n' \
    'exec /usr/bin/sha256sum "$@"\n'


def test_a_damaged_push_leaves_nothing_and_a_run_past_its_timeout_is_stopped(tmp_path: Path, sme2_qemu: Path,
                                                                            aarch64_runner_build: RunnerBuild,
                                                                            fp32: Any) -> None:
    host = _start(tmp_path / "sshd", sme2_qemu, shims={"sha256sum": DAMAGING_SHA256SUM})
    made: list[SshRunner] = []
    try:
        (host.home / "damaged").touch()
        made.append(SshRunner(aarch64_runner_build.path, host=host.address, config=host.client_config))
        with pytest.raises(DeviceError) as damaged:
            made[-1].device_info()  # the runner is pushed to be probed
        text = str(damaged.value)
        assert host.address in text and "arrived damaged" in text and "Nothing was left half-written" in text, text
        cache = host.home / ".cache/pytest-sme2/ssh"
        assert [p.name for p in cache.iterdir()] == [], "no bundle and no .part directory left behind"
        (host.home / "damaged").unlink()
        # The host-side timeout stops a run that outlasts it (many executions under emulation), and says how to fix.
        made.append(SshRunner(aarch64_runner_build.path, host=host.address, config=host.client_config,
                              timeout_s=3.0))
        with pytest.raises(RunnerError) as late:
            made[-1].run(_request(fp32, tmp_path, runs=500, timeout_s=3.0))
        text = str(late.value)
        assert "timed out after 3 s" in text and "--sme2-timeout" in text and late.value.returncode == 124, text
        assert not list((cache / "runs").iterdir())  # its run directory removed
    finally:
        for runner in made:
            runner.close()
        host.stop()


def test_unreachable_host_refused_key_and_unknown_host_key_say_the_fix(ssh_host: LocalSshHost,
                                                                       aarch64_runner_build: RunnerBuild,
                                                                       tmp_path: Path) -> None:
    closed = f"root@127.0.0.1:{free_port()}"
    with pytest.raises(DeviceError) as unreachable:
        SshRunner(aarch64_runner_build.path, host=closed, config=ssh_host.client_config).device_info()
    text = str(unreachable.value)
    assert closed in text and "unreachable" in text and "Connection refused" in text, text

    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=30)
    with pytest.raises(DeviceError) as refused:
        SshRunner(aarch64_runner_build.path, host=ssh_host.address,
                  config=ssh_host.config_with_key(stranger)).device_info()
    text = str(refused.value)
    assert ssh_host.address in text and "refused this machine's keys" in text and "authorized_keys" in text, text

    unknown = tmp_path / "unknown_host_config"
    unknown.write_text(ssh_host.client_config.read_text().replace(str(ssh_host.root / "known_hosts"),
                                                                    str(tmp_path / "empty_known_hosts")))
    with pytest.raises(DeviceError) as host_key:
        SshRunner(aarch64_runner_build.path, host=ssh_host.address, config=unknown).device_info()
    assert "host key is not in your known_hosts" in str(host_key.value)
    assert not [c for c in ssh_host.commands if PUSH in c]  # nothing reached the host


def test_a_host_that_is_not_arm_has_no_runner(tmp_path: Path, sme2_qemu: Path,
                                              aarch64_runner_build: RunnerBuild) -> None:
    host = _start(tmp_path / "x86", sme2_qemu, pretend_aarch64=False)
    try:
        with pytest.raises(ConfigError) as refused:
            SshRunner(aarch64_runner_build.path, host=host.address, config=host.client_config).device_info()
    finally:
        host.stop()
    text = str(refused.value)
    assert f"ssh host {host.address} is Linux x86_64" in text and "no runner for this one" in text, text
    assert "--sme2-device=host" in text


def test_the_pool_reads_each_ssh_host_and_leaves_out_the_ones_it_cannot_use(tmp_path: Path, sme2_qemu: Path,
                                                                           aarch64_runner_build: RunnerBuild,
                                                                           sme2_shared_cache: Path) -> None:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners import pool, registry

    sme2 = _start(tmp_path / "sme2", sme2_qemu)
    nosme = _start(tmp_path / "nosme", sme2_qemu, cpu="max,sme=off")
    x86 = _start(tmp_path / "x86", sme2_qemu, pretend_aarch64=False)
    closed = f"root@127.0.0.1:{free_port()}"
    try:
        # One client config for every host (each host's key is in its own known_hosts: merge them).
        config = tmp_path / "ssh_config"
        known = tmp_path / "known_hosts"
        known.write_text("".join((h.root / "known_hosts").read_text() for h in (sme2, nosme, x86)))
        config.write_text(sme2.client_config.read_text().replace(str(sme2.root / "known_hosts"), str(known)))
        for h in (nosme, x86):
            (h.root / "authorized_keys").write_text((sme2.root / "client_key.pub").read_text())
        # --sme2-runner as a pool of phones and hosts has it: the phones' NDK build (its loader is Android's), which
        # the hosts cannot run: they get pytest-sme2's own.
        ndk = tmp_path / "ndk_runner"
        ndk.write_bytes(aarch64_runner_build.path.read_bytes()[:64] + b"/system/bin/linker64\0")
        options = Sme2Options(pool=("ssh",), ssh_hosts=(sme2.address, nosme.address, x86.address, closed),
                              ssh_config=config, cache_dir=sme2_shared_cache, runner=ndk)
        found = pool.discover(options)
        by_address = {e.options["ssh_host"]: e for e in found.entries}
        assert set(by_address) == {sme2.address, nosme.address}, found.lines()
        on, off = by_address[sme2.address], by_address[nosme.address]
        assert (on.sme2, on.svl_bits, on.device, on.source) == (True, 256, "ssh", "ssh")
        assert (off.sme2, off.svl_bits) == (False, None)
        assert on.name == pool.entry_name(sme2.address.partition("@")[2])  # host and port, as written, no user
        assert on.options["runner"] is None and off.options["runner"] is None  # not the phones' build
        assert all("implementer 0x00" in e.emulated for e in (on, off)) and on.rooted is True
        assert "sme2" in on.identity["isa"] and "sme2" not in off.identity["isa"]
        left = {x.address: x.reason for x in found.left_out}
        assert set(left) == {x86.address, closed}, found.lines()
        assert "no runner for this one" in left[x86.address] and "unreachable" in left[closed]
        assert any("EMULATED" in line for line in found.lines())
        # What a test needs routes by these facts.
        assert pool.serving(pool.Need.parse("sme2"), found.entries) == (on,)
        # The worker holding an entry makes the ssh device's runner for it from the session's options.
        runner = registry.make_runner(registry.resolve(on.runner_options(options)),
                                      registry.RunnerContext(runner_cache=sme2_shared_cache / "runners"))
        try:
            assert runner.name == "ssh" and runner.device_info().sme2 is True
        finally:
            runner.close()  # type: ignore[attr-defined]
        # Liveness: a host that answers is alive; one that stopped says what became of it.
        assert pool.alive(on) == ""
        sme2.stop()
        gone = pool.alive(on)
        assert gone and sme2.address in gone, gone
    finally:
        for h in (sme2, nosme, x86):
            h.stop()


# The recorded toy_cnn program the lab's own tests profile (tests/plugin/test_lab.py), here on real hosts.
LAB_TESTS = RECORDED + textwrap.dedent("""\

    @pytest.mark.sme2_device("sme2")
    @pytest.mark.parametrize("n", range(2))
    def test_sme2(n, sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("no-sme2")
    def test_no_sme2(sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("sme2", matrix=True)
    def test_matrix(sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("svl>=4096")
    def test_long_vectors(sme2_runner):
        sme2_runner.profile(Recorded())
    """)


def test_a_lab_of_ssh_hosts_runs_each_test_where_it_should(tmp_path: Path, sme2_qemu: Path,
                                                           aarch64_runner_build: RunnerBuild,
                                                           sme2_shared_cache: Path) -> None:
    sme2 = _start(tmp_path / "sme2", sme2_qemu)
    nosme = _start(tmp_path / "nosme", sme2_qemu, cpu="max,sme=off")
    closed = f"root@127.0.0.1:{free_port()}"
    try:
        config = tmp_path / "ssh_config"
        known = tmp_path / "known_hosts"
        known.write_text("".join((h.root / "known_hosts").read_text() for h in (sme2, nosme)))
        config.write_text(sme2.client_config.read_text().replace(str(sme2.root / "known_hosts"), str(known)))
        (nosme.root / "authorized_keys").write_text((sme2.root / "client_key.pub").read_text())
        project = tmp_path / "project"
        project.mkdir()
        (project / "test_lab.py").write_text(LAB_TESTS)
        # The hosts in the ini, one per line, as a lab's project keeps them.
        (project / "pytest.ini").write_text(f"[pytest]\nsme2_ssh_hosts =\n    {sme2.address}\n    {nosme.address}\n"
                                            f"    {closed}\n")
        results = tmp_path / "results.json"
        cmd = [sys.executable, "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs",
               "--sme2-pool=ssh", f"--sme2-ssh-config={config}", f"--sme2-cache-dir={sme2_shared_cache}",
               "--sme2-blocks=1", "--sme2-runs=1", "--sme2-warmup=0", "--sme2-busy-limit=100",
               f"--sme2-json={results}", f"--sme2-markdown={tmp_path / 'r.md'}"]
        done = subprocess.run(cmd, cwd=project, env=dict(os.environ), capture_output=True, text=True, timeout=900,
                              check=False)
    finally:
        for h in (sme2, nosme):
            h.stop()
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    # The pool, printed once: both hosts read (emulated, said so), the closed port left out with its fix.
    assert out.count("sme2 device pool: 2 device(s), 1 left out") == 1, out[-3000:]
    assert f"left out: ssh {closed}" in out and "unreachable" in out
    assert out.count("EMULATED (an emulated CPU (CPU implementer 0x00") == 2, out[-3000:]
    on_name, off_name = (pool_name(h.address) for h in (sme2, nosme))
    records: dict[str, list[dict[str, Any]]] = {}
    for record in json.loads(results.read_text())["tests"]:
        records.setdefault(record["test_id"].partition("::")[2], []).append(record)
    assert all(len(r) == 1 for r in records.values()), records  # exactly once
    ran = {name: r[0]["device"] for name, r in records.items() if r[0]["profile"]}
    assert ran["test_sme2[0]"] == ran["test_sme2[1]"] == on_name, ran
    assert ran["test_no_sme2"] == off_name
    assert {k: v for k, v in ran.items() if k.startswith("test_matrix[")} == {f"test_matrix[{on_name}]": on_name}
    assert "test_long_vectors" not in ran
    assert "no device of the pool can run it (needs svl>=4096)" in out
    # Each test's identity is its host's: SME2 on the SME2 host, none on the other; every latency emulated.
    assert "sme2" in records["test_sme2[0]"][0]["profile"]["identity"]["isa"]
    assert "sme2" not in records["test_no_sme2"][0]["profile"]["identity"]["isa"]
    assert all(r[0]["emulated"] for r in records.values() if r[0]["profile"])


def pool_name(address: str) -> str:
    """A host's name in the pool: its host and port as written (no user), made safe for a test id."""
    from pytest_sme2.runners.pool import entry_name

    return entry_name(address.partition("@")[2])
