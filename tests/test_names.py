"""One name per concept (issue 27 item 5): files written under the old names still load under the new ones.

The old files in ``tests/data/old_keys`` were written by the code before the renames (see its README).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.cli import _recorded_by_test
from pytest_sme2.device.facts import device_facts, device_info_from_facts
from pytest_sme2.device.identity import DeviceIdentity
from pytest_sme2.evidence.instructions import LABEL
from pytest_sme2.measure.profile import Profile, stored_identity
from pytest_sme2.plugin.measure import backend_and_variant
from pytest_sme2.plugin.records import attach, carried_result, result_of, update
from pytest_sme2.report.tables import device_summary
from pytest_sme2.results import TestResult, load_results, write_results
from pytest_sme2.store.baseline import COUNTED, BaselineStore

OLD = Path(__file__).parent / "data" / "old_keys"
OLD_RESULTS = OLD / "results_fingerprint_key.json"


def _old_profile() -> dict[str, object]:
    profile = json.loads(OLD_RESULTS.read_text())["tests"][0]["profile"]
    assert "fingerprint" in profile and "identity" not in profile  # the file is what the old code wrote
    return dict(profile)


def test_a_results_file_with_the_fingerprint_key_loads_its_identity(tmp_path: Path) -> None:
    old_identity = _old_profile()["fingerprint"]
    test = load_results(OLD_RESULTS).tests[0]
    assert test.profile is not None and test.profile.identity == old_identity
    assert test.profile.identity["cpu_model"] == "AMD EPYC"
    # Written again, it says identity, once.
    again = write_results(tmp_path / "again.json", load_results(OLD_RESULTS))
    profile = json.loads(again.read_text())["tests"][0]["profile"]
    assert profile["identity"] == old_identity and "fingerprint" not in profile
    assert load_results(again).tests[0] == test


def test_a_profile_prefers_identity_and_reads_fingerprint() -> None:
    old = _old_profile()
    assert Profile.from_dict(old).identity == old["fingerprint"]
    new = {**old, "identity": {"arch": "aarch64"}}
    assert Profile.from_dict(new).identity == {"arch": "aarch64"}
    assert stored_identity({}) == {} and stored_identity({"fingerprint": "not a mapping"}) == {}


def test_compare_reads_the_identity_of_an_old_profile_summary(tmp_path: Path) -> None:
    old = _old_profile()
    summary = tmp_path / "summary.json"  # what `pytest-sme2 profile` wrote: the analysis plus the profile
    summary.write_text(json.dumps({**old["analysis"], "profile": old}))  # type: ignore[dict-item]
    recorded = _recorded_by_test(summary)[""]
    assert recorded.identity == old["fingerprint"]


# ------------------------------------------------------------------- backend (an export) vs variant (a runner build)


def test_backend_is_its_own_keyword_and_the_old_variant_spelling_still_reads() -> None:
    assert backend_and_variant("portable", None) == ("portable", None, "backend")
    assert backend_and_variant(None, "sme2_off") == (None, "sme2_off", "backend")
    assert backend_and_variant(None, None) == (None, None, "backend")
    # What earlier releases wrote: a backend under variant=, read as backend= and named as the test wrote it.
    assert backend_and_variant(None, "portable") == ("portable", None, "variant")
    assert backend_and_variant(None, "xnnpack") == ("xnnpack", None, "variant")


@pytest.mark.parametrize(("backend", "variant", "message"), [
    (None, "sme3", "sme2_runner.profile(variant='sme3'): unknown variant; allowed: None (the default build), "
                   "'sme2_on', 'sme2_off'; an export backend is backend= ('xnnpack', 'portable')"),
    ("sme2_on", None, "sme2_runner.profile(backend='sme2_on'): unknown backend; allowed: None (the exported "
                      "model's), 'xnnpack', 'portable'"),
    ("portable", "sme2_on", "sme2_runner.profile(backend='portable', variant='sme2_on'): pass one"),
])
def test_a_wrong_backend_or_variant_fails_with_what_is_allowed(backend: str | None, variant: str | None,
                                                               message: str) -> None:
    with pytest.raises(pytest.fail.Exception, match=re.escape(message)):
        backend_and_variant(backend, variant)


# --------------------------------------------------------------------------------------- one test-result type


class _Item:
    """What the plugin's result helpers use of a pytest item: its node id and its stash."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid, self.stash = nodeid, pytest.Stash()


def test_the_plugin_carries_the_one_result_type_to_the_controller() -> None:
    old = load_results(OLD_RESULTS).tests[0]
    item = _Item(old.test_id)
    assert result_of(item) == TestResult(old.test_id)  # type: ignore[arg-type]
    update(item, model={"name": "toy_cnn"}, warnings=("repaired",))  # type: ignore[arg-type]
    built = update(item, profile=old.profile, note="measured")  # type: ignore[arg-type]
    assert built.model == {"name": "toy_cnn"} and built.warnings == ("repaired",) and built.profile == old.profile
    report = pytest.TestReport(old.test_id, ("t.py", 1, "t"), {}, "passed", None, "call", [])
    attach(item, report)  # type: ignore[arg-type]
    carried = carried_result(report)
    assert carried is not None and json.loads(json.dumps(carried)) == carried  # what xdist sends: plain JSON
    assert TestResult.from_dict(carried) == replace(built, outcome="passed")


# ------------------------------------------------------------------------------ one device-facts vocabulary

OLD_DEVICE = OLD / "android_device_info.json"
SME2_PHONE = (Path(__file__).parent / "data" / "device" / "android_facts_sme2_phone.txt").read_text()


def test_device_facts_and_the_identity_name_one_fact_alike() -> None:
    info = device_info_from_facts("EMU1", SME2_PHONE)
    facts, ident = info.to_dict(), info.identity().to_dict()
    for name in ("cpu_name", "logical_cpus", "product", "soc", "abi", "sdk", "arch"):
        assert name in facts and name in ident, name
    assert (facts["product"], facts["logical_cpus"]) == (ident["product"], ident["logical_cpus"])
    assert (facts["product"], facts["logical_cpus"]) == ("EmuPhone SME2", 8)
    assert not {"cpu_model", "cores", "model"} & set(facts)
    # The fixture's older attribute names still read.
    assert (info.cpu_model, info.cores, info.model) == (info.cpu_name, info.logical_cpus, info.product)


def test_device_facts_recorded_under_the_old_names_still_read() -> None:
    old = json.loads(OLD_DEVICE.read_text())
    assert {"cpu_model", "cores", "model"} <= set(old)  # the file is what the old code wrote
    now = device_info_from_facts("EMU1", SME2_PHONE).to_dict()
    assert device_facts(old) == now  # every fact, under today's name
    assert device_facts(now) == now
    profile = Profile.from_dict({**_old_profile(), "device": old})
    assert profile.device == now
    assert device_summary(profile.device, {}) == device_summary(old, {})
    # what the code before the renames said of it
    assert device_summary(old, {}) == "EmuPhone SME2, Mediatek MT6993, aarch64, 16, 8 cores, SME2: yes"


# ------------------------------------------------------------------ the repository's own stored files still load

BASELINES = sorted((Path(__file__).parents[1] / ".sme2_baselines").glob("*.json"))


@pytest.mark.parametrize("path", BASELINES, ids=lambda p: p.name[-30:])
def test_the_committed_baselines_load_and_keep_their_file_names(path: Path) -> None:
    store = BaselineStore(path.parent)
    baseline = store.read(path)
    assert store.path_for(baseline.test_id, baseline.identity) == path  # the identity keys them as before
    if baseline.identity.get(COUNTED):
        # a count baseline is keyed without the host (counts_identity): no device facts, the emulator without "on"
        assert baseline.identity[COUNTED] == LABEL and "; on " not in baseline.identity["emulator"]
        assert "cpu_name" not in baseline.identity and "logical_cpus" not in baseline.identity
        return
    device = DeviceIdentity.from_dict(baseline.identity)  # the device facts under the names DeviceInfo now uses
    assert device.logical_cpus > 0 and device.arch and "cpu_name" in baseline.identity
    assert baseline.identity.get("variant") in (None, "sme2_on", "sme2_off")  # a variant is a runner build


def test_there_are_committed_baselines() -> None:
    assert len(BASELINES) >= 20
