"""The runner registry (:mod:`pytest_sme2.runners.registry`): a device is one module plus one row, and both front ends
offer it.

The device of one's own here is a board that replays a recorded ETDump from tests/data (the toy_cnn recording): each
block's end-to-end times are the recording's first runs, as many as the block executes. It never invents a time; the
numbers asserted are read from the same recording independently, with :func:`read_etdump`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_sme2.evidence.trace import read_etdump

DATA = Path(__file__).parents[1] / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"

#: The whole device: its runner and its registry row, in one module the user writes (nothing else is edited).
BOARD = '''
    """A device of one's own: a board that replays a recorded ETDump, never inventing a time."""

    from pathlib import Path

    from pytest_sme2.errors import RunnerError
    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.runners.base import Runner, RunRequest, RunResult
    from pytest_sme2.runners.registry import Device, register_device

    TRACE = Path({trace!r})


    class ReplayBoard(Runner):
        name = "replay_board"

        def identity(self):
            return {{"os": "linux", "arch": "aarch64", "cpu_name": "a recorded toy_cnn trace"}}

        def build_identity(self, variant):
            return {{"runner": f"replay of {{TRACE.name}}"}}

        def run(self, request: RunRequest) -> RunResult:
            recorded = [float(x) for x in read_etdump(TRACE).e2e_ms_per_run()]
            if request.executions > len(recorded):
                raise RunnerError(f"{{TRACE.name}} holds {{len(recorded)}} runs; {{request.executions}} asked for")
            return RunResult(runner=self.name, e2e_ms=tuple(recorded[: request.executions]), warmup=request.warmup,
                             threads=request.threads, build=f"replay of {{TRACE.name}}", variant=request.variant,
                             per_operator_note="a replay: no per-operator trace")


    def make(options, context):
        return ReplayBoard()


    register_device(Device("replay_board", "a recorded toy_cnn trace, replayed", make))
'''

TESTS = '''
    from pathlib import Path

    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.program.export import ExportedModel

    DATA = Path({data!r})


    def test_on_the_board(sme2_runner, sme2_baseline):
        model = ExportedModel(name="toy_cnn", dtype="fp32", backend="xnnpack",
                              pte_path=DATA / "toy_cnn_fp32_xnnpack.pte", etrecord_path=None,
                              input_files=(DATA / "toy_cnn_input_fp32.bin",), input_shapes=((1, 3, 32, 32),),
                              input_dtypes=("float32",), cache_key="recorded", executorch_version="",
                              torch_version="", cached=True, export_seconds=0.0)
        profile = sme2_runner.profile(model)
        recorded = [float(x) for x in read_etdump(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump").e2e_ms_per_run()]
        assert profile.runs and all(r.runner == "replay_board" for r in profile.runs)
        assert all(list(r.e2e_ms) == recorded[: len(r.e2e_ms)] for r in profile.runs)
        sme2_baseline.check(profile)
'''


def _recorded() -> list[float]:
    return [float(x) for x in read_etdump(TOY_TRACE).e2e_ms_per_run()]


def test_a_device_of_ones_own_runs_through_pytest(pytester: pytest.Pytester) -> None:
    """One module (a runner and its row), named by ``sme2_models``: ``--sme2-device=replay_board`` measures on it, and
    the baseline it records holds the recording's runs."""
    pytester.makepyfile(board=textwrap.dedent(BOARD.format(trace=str(TOY_TRACE))))
    pytester.makeini("[pytest]\nsme2_models = board.py\n")
    pytester.makepyfile(test_board=textwrap.dedent(TESTS.format(data=str(DATA))))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--sme2-device=replay_board", "--sme2-runs=5",
                                           "--sme2-warmup=1", "--sme2-blocks=2", "--sme2-busy-limit=100",
                                           "--sme2-update-baseline", timeout=300)
    result.assert_outcomes(passed=1)
    baselines = list((pytester.path / ".sme2_baselines").glob("*.json"))
    assert len(baselines) == 1
    stored = json.loads(baselines[0].read_text())
    recorded = _recorded()
    # Every block's measured runs are the recording's, after its one warm-up (a block may have grown its runs).
    assert stored["samples_ms"] and all(any(x == pytest.approx(r) for r in recorded[1:]) for x in stored["samples_ms"])
    assert stored["samples_ms"][:5] == pytest.approx(recorded[1:6])
    assert "replay_board" in json.dumps(stored)


def test_a_device_of_ones_own_runs_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same module, named by ``profile --models``: ``--device replay_board`` profiles the recorded program on it."""
    from pytest_sme2.cli import main

    board = tmp_path / "board_cli.py"
    board.write_text(textwrap.dedent(BOARD.format(trace=str(TOY_TRACE))))
    code = main(["profile", "--pte", str(TOY_PTE), "--device", "replay_board", "--models", str(board), "--runs", "5",
                 "--warmup", "1", "--blocks", "2", "--busy-limit", "100", "--cache-dir", str(tmp_path / "cache"),
                 "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "on replay_board (replay of toy_cnn_fp32_xnnpack_simd-on_t1.etdump)" in out
    summary = json.loads((tmp_path / "out" / "toy_cnn_fp32_xnnpack" / "analysis_summary.json").read_text())
    recorded = _recorded()
    assert summary["e2e_ms"]["per_run"] == pytest.approx(recorded[1:6] + recorded[1:6])  # each block: 1 warm-up + 5


def test_an_unknown_device_lists_the_registered_ones(pytester: pytest.Pytester, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Both front ends refuse a name the registry does not know, naming the ones it does (a usage error)."""
    from pytest_sme2.cli import main
    from pytest_sme2.runners import registry

    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess("--sme2-device=phone")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid choice: 'phone'" in result.stderr.str() and "local, host, android, qemu" in result.stderr.str()
    assert main(["profile", "--pte", str(TOY_PTE), "--device", "phone", "--out", str(tmp_path)]) == 2
    assert "invalid choice: 'phone'" in capsys.readouterr().err
    assert registry.names()[:4] == ("local", "host", "android", "qemu")


def test_rows_say_what_each_device_takes_and_whether_it_measures_here() -> None:
    """The rules that were spelled out per device in the plugin and the CLI, read from the rows."""
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import PYTEST, Spelling, check_options, device

    assert [d for d in ("local", "host", "android", "qemu") if device(d).host_lock] == ["local", "host", "qemu"]
    assert device("host").own_runner == "host" and device("qemu").own_runner == "linux-aarch64"
    assert device("android").own_runner is None and not device("local").on_off
    with pytest.raises(Exception, match="--sme2-serial abc only applies to --sme2-device=android"):
        check_options(Sme2Options(device="host", serial="abc"), PYTEST)
    cli = Spelling("--", "--device ", frozenset(("serial", "libcxx", "runner_libs", "big_cores", "cooldown",
                                                 "fixed_performance", "qemu")))
    with pytest.raises(Exception, match="--serial, --libcxx, --runner-libs, --big-cores, --cooldown and "
                       "--fixed-performance apply to --device android only"):
        check_options(Sme2Options(device="local", serial="abc"), cli)
    check_options(Sme2Options(device="android", runner=Path("r"), cooldown=0.0), PYTEST)  # the default spelled out


def test_a_runner_names_what_it_lacks_when_made_and_inherits_every_other_capability() -> None:
    """The Runner base class: identity, build_identity and run are required (a runner without run cannot be made);
    every other capability the library uses has a default."""
    from pytest_sme2.runners.base import MODE_LOG, MODE_TIMING, MODE_TRACE, Runner

    class NoRun(Runner):
        name = "no_run"

        def identity(self) -> dict[str, str]:
            return {}

        def build_identity(self, variant: str | None) -> dict[str, str]:
            return {}

    with pytest.raises(TypeError, match="run"):
        NoRun()  # type: ignore[abstract]

    class Small(NoRun):
        def run(self, request: object) -> object:  # type: ignore[override]
            raise AssertionError("not run here")

    small = Small()
    assert (small.emulated, small.in_process, small.on_this_host, small.records_executed) == (False,) * 4
    assert small.variants() == (None,) and small.device_info() is None and dict(small.run_settings()) == {}
    assert [small.has_build(None, m) for m in (MODE_TRACE, MODE_TIMING, MODE_LOG)] == [True, False, False]
    assert small.runner_for(None) is None and small.binary_for(None, MODE_TIMING) is None


def test_a_name_is_one_device() -> None:
    """Registering a second factory under a registered name is refused; the same row again (a module imported
    twice) is not a clash."""
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.runners.registry import Device, device, register_device

    with pytest.raises(ConfigError, match="'host' is registered twice"):
        register_device(Device("host", "another host", "my_boards:make"))
    host = device("host")
    assert register_device(host) is host and device("host") is host
