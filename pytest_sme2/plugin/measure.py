"""The ``sme2_runner`` fixture's object: exports for a backend and measures exported models on a runner build.

The words: a *backend* is what a model is exported for (``backend="portable"``/``"xnnpack"``, compared on the
local runtime); a *variant* is a runner build (``variant="sme2_on"``/``"sme2_off"``): variants need two runner
builds, and are skipped with the reason where they cannot be measured (the local runtime, a missing build, a
device without SME2) — never faked. So is a test whose
``sme2_threshold(require_sme2_kernels=True)`` cannot be met on a device without SME2.

Each arm with an XNNPACK-logging build gets its kernel log (run once per session and model, see
``Sme2Session.kernel_log``) attached to its profile's analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.measure.hostlock import heavy_work
from pytest_sme2.plugin.markers import ModelRequest, parse_model_marker, parse_threshold_marker
from pytest_sme2.plugin.records import EXPORT_POOL_KEY, test_id, update
from pytest_sme2.plugin.session import Sme2Session, call, worker_id

if TYPE_CHECKING:
    # Two interleaved measurements of one model (SME2 off/on, or two backends): ``sme2_baseline.check`` judges the
    # speedup ``off`` -> ``on`` on the pair, and ``on`` against the baseline (see pytest_sme2.measure.pair).
    from pytest_sme2.measure.pair import Pair
    from pytest_sme2.runners.base import Runner
    from pytest_sme2.runners.registry import Device

MODEL_REQUEST_KEY = pytest.StashKey[ModelRequest]()
#: The way to run an SME2 on/off comparison on any Linux machine, named by every skip that has no SME2 on/off.
EMULATED_ON_OFF = ("Run it on this machine with --sme2-device=qemu: an emulated Armv9 CPU with SME2 on and off "
                   "(which kernels ran and the outputs; emulated time), on any Linux machine with qemu-aarch64 "
                   "11.1+ (docs/arm-emulation.md)")
#: The export backends the local runtime compares (``profile(backend=...)``, ``compare_backends``).
LOCAL_BACKENDS = ("xnnpack", "portable")
#: The runner builds ``profile(variant=...)`` takes: the default build (None), SME2 on, SME2 off.
VARIANTS = (None, "sme2_on", "sme2_off")


def backend_and_variant(backend: str | None, variant: str | None) -> tuple[str | None, str | None, str]:
    """``profile()``'s ``backend=`` and ``variant=``, checked: ``(backend, variant, the keyword naming the backend)``.

    ``variant="portable"``/``"xnnpack"`` is the spelling of earlier releases for ``backend=``: still read, and the
    messages about it name ``variant`` as the test wrote it. A bad value fails the test (not an error in pytest).
    """
    word = "backend"
    if backend is None and variant in LOCAL_BACKENDS:
        backend, variant, word = variant, None, "variant"
    if variant not in VARIANTS:
        pytest.fail(f"sme2_runner.profile(variant={variant!r}): unknown variant; allowed: None (the default build), "
                    f"{', '.join(repr(v) for v in VARIANTS if v)}; an export backend is backend= "
                    f"({', '.join(repr(b) for b in LOCAL_BACKENDS)})", pytrace=False)
    if backend is not None and backend not in LOCAL_BACKENDS:
        pytest.fail(f"sme2_runner.profile(backend={backend!r}): unknown backend; allowed: None (the exported "
                    f"model's), {', '.join(repr(b) for b in LOCAL_BACKENDS)}", pytrace=False)
    if backend is not None and variant is not None:
        pytest.fail(f"sme2_runner.profile(backend={backend!r}, variant={variant!r}): pass one; a backend is compared "
                    "on the local runtime, a runner build (variant) on a device", pytrace=False)
    return backend, variant, word


def _model_spec(request: ModelRequest) -> Any:
    from pytest_sme2.models import ModelSpec, get_model

    if isinstance(request.model, str):
        return get_model(request.model)
    factory = request.model

    def build() -> tuple[Any, tuple[Any, ...]]:
        module = factory()
        if isinstance(module, tuple):
            return module  # already (module, inputs)
        inputs = getattr(module, "example_inputs", None)
        if inputs is None and request.inputs is None:
            raise Sme2Error(f"model callable {request.name} returned a module without example inputs; "
                            "pass inputs=(tensor, ...) to sme2_model")
        return module, tuple(inputs or ())

    return ModelSpec(request.name, build, f"{getattr(factory, '__module__', '?')}.{request.name}")


def export_ahead(session: Sme2Session, items: list[pytest.Item]) -> None:
    """Once per session, before its first measurement: export the models of ``items`` the cache lacks, in
    ``--sme2-export-processes`` worker processes (see pytest_sme2.program.pool). Only models named by a registered
    name without ``inputs=`` can go to a worker; the rest, and whatever a worker could not do, export in their
    tests as before. Under pytest-xdist the workers are already parallel, so each exports in its tests."""
    stash = session.config.stash
    if EXPORT_POOL_KEY in stash:
        return
    stash[EXPORT_POOL_KEY] = None
    from pytest_sme2.program.pool import default_processes, export_all

    processes = session.options.export_processes or default_processes()
    if processes < 2 or worker_id(session.config) is not None:
        return
    jobs = _missing_exports(session, items)
    if len(jobs) < 2:
        return  # one export gains nothing from a worker that must first import torch and executorch
    try:
        with heavy_work(session.host_lock, what="exporting models ahead", progress=session.progress):
            stash[EXPORT_POOL_KEY] = export_all(jobs, cache_dir=session.options.cache_dir, processes=processes,
                                             model_sources=session.options.models, progress=session.progress)
    finally:
        session.status.clear()


def _missing_exports(session: Sme2Session, items: list[pytest.Item]) -> list[Any]:
    """The pool's jobs: each (registered model, dtype, backend) of ``items`` not in the export cache, once."""
    from pytest_sme2.models import get_model
    from pytest_sme2.program.export import find_cached
    from pytest_sme2.program.pool import ExportJob

    seen: set[tuple[str, str, str]] = set()
    jobs = []
    for item in items:
        if "exported_model" not in getattr(item, "fixturenames", ()) or item.get_closest_marker("skip") is not None:
            continue
        try:
            request = parse_model_marker(item)
        except pytest.fail.Exception:
            continue  # the test itself reports its marker
        if not isinstance(request.model, str) or request.inputs is not None:
            continue  # a callable or marker inputs: only the test's own process has them
        what = (request.model, request.dtype, request.backend)
        if what in seen:
            continue
        seen.add(what)
        try:
            spec = get_model(request.model)
            key, hit = find_cached(spec, dtype=request.dtype, backend=request.backend,
                                   cache_dir=session.options.cache_dir)
        except Sme2Error:
            continue  # an unknown or broken model: its test says so
        if hit is None:
            source = spec.origin.rpartition(":")[0]
            jobs.append(ExportJob(request.model, request.dtype, request.backend, key,
                                  source if source and Path(source).is_file() else ""))
    return jobs


def export(session: Sme2Session, request: ModelRequest, backend: str | None = None) -> Any:
    from pytest_sme2.program.export import export_model

    spec = _model_spec(request)
    try:
        # Holding the host's lock shared: a cache hit costs nothing, an export waits for a sibling's measurement.
        with heavy_work(session.host_lock, what=f"exporting {request.name}", progress=session.progress):
            exported = export_model(spec, dtype=request.dtype, backend=backend or request.backend,
                                    inputs=request.inputs, cache_dir=session.options.cache_dir,
                                    progress=session.progress)
    finally:
        session.status.clear()
    return exported


class Sme2Runner:
    """The ``sme2_runner`` fixture: measures exported models on the selected device.

    Every profile it returns carries its own :class:`~pytest_sme2.measure.recipe.Measurement`, so checking one
    profile re-measures that profile — never whichever was measured last.
    """

    def __init__(self, session: Sme2Session, item: pytest.Item) -> None:
        self._session = session
        self._item = item

    @property
    def device(self) -> str:
        return self._session.options.device

    @property
    def runner(self) -> Runner:
        return self._session.runner

    @property
    def _row(self) -> Device:
        """This session's device in the registry: what it can compare, what it skips."""
        from pytest_sme2.runners.registry import device

        return device(self.device)

    def _skip_without_sme2_builds(self, variant: str) -> None:
        from pytest_sme2.runners.registry import device

        o = self._session.options
        row = device(o.device)
        if not row.on_off:
            pytest.skip(f"variant {variant!r} needs two executor_runner builds (SME2 on/off); {row.no_on_off}. "
                        f"{EMULATED_ON_OFF}; on SME2 hardware: --sme2-device=host or android with "
                        "--sme2-runner/--sme2-runner-off")
        if variant not in self.runner.variants():
            if o.own_runner:
                # pytest-sme2's own runner is one build for this CPU: there is no SME2-off build of it to pass.
                pytest.skip(f"variant {variant!r} needs SME2 on and off, and --sme2-device={o.device} runs "
                            "pytest-sme2's own runner as one build on this CPU. Run the SME2 on/off comparison with "
                            "--sme2-device=qemu (an emulated Armv9 CPU with SME2 on and off, same runner), or pass "
                            "your own SME2-on/off executor_runner builds with --sme2-runner and --sme2-runner-off")
            pytest.skip(f"variant {variant!r} is not available: pass --sme2-runner-off with the SME2-off build. "
                        f"{EMULATED_ON_OFF}")
        device_info = self.runner.device_info()
        if variant == "sme2_on" and device_info is not None and device_info.sme2 is False:
            pytest.skip(f"device {device_info.name or device_info.serial} has no SME2 (no 'sme2' in its CPU "
                        f"features): an SME2-on measurement there would not measure SME2. {EMULATED_ON_OFF}")

    def _skip_if_sme2_kernels_cannot_run(self) -> None:
        """``require_sme2_kernels`` on a device that reports no SME2 cannot be met: skip, with the reason."""
        if not parse_threshold_marker(self._item).require_sme2_kernels:
            return
        from pytest_sme2.device.identity import reports_sme2

        identity = call(self.runner.identity)
        if reports_sme2(identity) is False:
            name = identity.get("product") or identity.get("cpu_name") or self.device
            pytest.skip(f"sme2_threshold(require_sme2_kernels=True): the device ({name}) reports no SME2, so no SME2 "
                        "kernel can run there. Run it with --sme2-device=qemu: an emulated Armv9 CPU whose SME2 "
                        "kernels really run (emulated time), on any Linux machine with qemu-aarch64 11.1+")

    def time_gated(self) -> bool:
        """Whether latency is judged: not on an emulated device measured for its evidence only (its default)."""
        return not self.runner.emulated or self._session.options.emulated_timing

    def counts(self) -> bool:
        """Whether this test counts the instructions its arms execute under emulation (``--sme2-count-instructions``
        or ``sme2_threshold(instructions_pct=...)``)."""
        return parse_threshold_marker(self._item).instructions(self._session.options.count_instructions) is not None

    def counted(self, profile: Any) -> Any:
        """``profile`` with the instructions its arm executed under emulation, when this test counts them
        (``--sme2-count-instructions`` or ``sme2_threshold(instructions_pct=...)``) and the device can."""
        from dataclasses import replace

        if not self.counts() or profile.measurement is None:
            return profile
        counts = call(lambda: self._session.instruction_counts(profile.measurement))
        return replace(profile, instructions=counts) if counts is not None else profile

    def measurement(self, exported: Any, *, variant: str | None = None, runs: int | None = None,
                    blocks: int | None = None) -> Any:
        """How this session measures ``exported`` (runs, warm-up, blocks, threads, latency source)."""
        from pytest_sme2.measure.recipe import Measurement

        o = self._session.options
        lock = self._session.host_lock
        # An emulated device measured for its evidence only: a busy machine cannot make its answers wrong (which
        # kernels ran, the outputs), so its one execution per arm is never measured again for other load.
        busy_limit = o.busy_limit / 100 if self.time_gated() else 1.0
        return call(lambda: Measurement.of(
            exported, runs=o.runs if runs is None else runs, warmup=o.warmup, threads=o.threads,
            out_dir=self._session.out_dir / _safe(test_id(self._item)), variant=variant,
            blocks=o.blocks if blocks is None else blocks, timeout_s=o.timeout,
            latency=self._session.latency, busy_limit=busy_limit, time_budget_s=o.time_budget,
            min_block_ms=o.min_block_ms, max_block_ms=o.max_block_ms, lock_file=lock,
            precision=parse_threshold_marker(self._item).precision(o)))

    def profile(self, exported: Any, *, variant: str | None = None, backend: str | None = None,
                runs: int | None = None) -> Any:
        """Measure ``exported`` (``--sme2-blocks`` blocks of ``--sme2-runs``); returns a Profile.

        ``backend`` measures the model exported for that backend instead (local runtime); ``variant`` runs that
        runner build (``sme2_on``/``sme2_off``) on a device.
        """
        from pytest_sme2.measure.profile import measure

        check_exported(exported, "profile")
        backend, variant, word = backend_and_variant(backend, variant)
        target = exported
        if backend is not None:
            if not self._row.compares_backends:
                pytest.skip(f"{word} {backend!r} compares backends on the local runtime only: run it with "
                            "--sme2-device=local (the default)")
            req = self._item.stash.get(MODEL_REQUEST_KEY, None)
            if req is None:
                pytest.fail(f"{word}= needs the exported_model fixture of this test", pytrace=False)
            if backend != exported.backend:
                target = call(lambda: export(self._session, req, backend=backend))
        elif variant is not None:
            self._skip_without_sme2_builds(variant)
        self._skip_if_sme2_kernels_cannot_run()
        m = self.measurement(target, variant=variant, runs=runs)
        with self._session.third_party(test_id(self._item)):
            log = call(lambda: self._session.kernel_log(m))
            ran = call(lambda: self._session.executed_kernels(m, counted=self.counts()))
            result = call(lambda: measure(self.runner, m, kernel_log=log, rules=self._session.rules, executed=ran,
                                          progress=self._session.progress))
            result = self.counted(result)
        self._session.status.clear()
        update(self._item, profile=result)
        return result

    def profile_on_off(self, exported: Any, *, runs: int | None = None, blocks: int | None = None) -> Pair:
        """Measure the SME2-off and SME2-on builds in interleaved blocks (ABBA)."""
        from dataclasses import replace

        from pytest_sme2.measure.pair import measure_on_off
        from pytest_sme2.runners.base import SME2_OFF, SME2_ON

        check_exported(exported, "profile_on_off")
        self._skip_without_sme2_builds(SME2_ON)
        self._skip_without_sme2_builds(SME2_OFF)
        off_m = self.measurement(exported, variant=SME2_OFF, runs=runs, blocks=blocks)
        on_m = self.measurement(exported, variant=SME2_ON, runs=runs, blocks=blocks)
        with self._session.third_party(test_id(self._item)):
            logs = (call(lambda: self._session.kernel_log(off_m)), call(lambda: self._session.kernel_log(on_m)))
            counted = self.counts()
            ran = (call(lambda: self._session.executed_kernels(off_m, counted=counted)),
                   call(lambda: self._session.executed_kernels(on_m, counted=counted)))
            pair: Pair = call(lambda: measure_on_off(self.runner, off_m, on_m, kernel_logs=logs,
                                                     rules=self._session.rules, what=f"{exported.name} SME2 off/on",
                                                     executed=ran, progress=self._session.progress))
            pair = replace(pair, off=self.counted(pair.off), on=self.counted(pair.on))
        self._session.status.clear()
        update(self._item, profile=pair.on, profile_off=pair.off)
        return pair

    def compare_backends(self, exported: Any, slower: str = "portable", faster: str = "xnnpack") -> Pair:
        """Measure the model exported for two backends in interleaved blocks on the local runtime.

        Returns a :class:`~pytest_sme2.measure.pair.Pair` (``off`` = ``slower``, ``on`` = ``faster``):
        ``sme2_baseline.check(pair)`` judges the speedup (``min_speedup``) and the ``faster`` arm against its baseline,
        and the reports show the per-category speedups, as for SME2 on/off on a device.
        """
        from pytest_sme2.measure.pair import measure_on_off

        check_exported(exported, "compare_backends")
        for backend in (slower, faster):
            if backend not in LOCAL_BACKENDS:
                pytest.fail(f"sme2_runner.compare_backends(): unknown backend {backend!r}; allowed: "
                            f"{', '.join(LOCAL_BACKENDS)}", pytrace=False)
        if not self._row.compares_backends:
            pytest.skip("compare_backends() compares exports on the local runtime: run it with --sme2-device=local "
                        "(the default); on a device, SME2 on/off is the comparison (profile_on_off)")
        req = self._item.stash.get(MODEL_REQUEST_KEY, None)
        if req is None:
            pytest.fail("compare_backends() needs the exported_model fixture of this test", pytrace=False)

        def export_for(backend: str) -> Any:
            if backend == exported.backend:
                return exported
            return call(lambda: export(self._session, req, backend=backend))

        off_arm, on_arm = (export_for(b) for b in (slower, faster))
        off_m, on_m = self.measurement(off_arm), self.measurement(on_arm)
        with self._session.third_party(test_id(self._item)):
            pair: Pair = call(lambda: measure_on_off(self.runner, off_m, on_m, rules=self._session.rules,
                                                     what=f"{exported.name} {slower} vs {faster}", off_label=slower,
                                                     on_label=faster, progress=self._session.progress))
        self._session.status.clear()
        update(self._item, profile=pair.on, profile_off=pair.off)
        return pair


def check_exported(exported: Any, method: str) -> None:
    if not hasattr(exported, "pte_path"):
        pytest.fail(f"sme2_runner.{method}() takes the exported_model fixture (an ExportedModel); got "
                    f"{type(exported).__name__} {exported!r:.60}", pytrace=False)


def _safe(nodeid: str) -> str:
    from pytest_sme2.store.baseline import safe_name

    return safe_name(nodeid)

