"""The device pool's data and routing (pytest_sme2.runners.pool) and the adb source's parsing, without a device."""

from __future__ import annotations

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.options import Sme2Options
from pytest_sme2.runners.android.source import pool_facts
from pytest_sme2.runners.pool import (
    Discovery,
    LeftOut,
    Need,
    PoolEntry,
    discover,
    entry_name,
    register_source,
    serving,
    unique_names,
    why_none,
)

pytestmark = pytest.mark.fast

SME2 = PoolEntry("EmuPhone_SME2", "adb", "127.0.0.1:40001", "android", {"serial": "127.0.0.1:40001"},
                 model="EmuPhone SME2", soc="Mediatek MT6993", sme2=True, svl_bits=512, rooted=False,
                 governor="schedutil")
NOSME = PoolEntry("EmuPhone_noSME", "adb", "127.0.0.1:40002", "android", {"serial": "127.0.0.1:40002"},
                  model="EmuPhone noSME", soc="Qualcomm SM8650", sme2=False, rooted=True, governor="schedutil")


def test_need_parses_its_terms_and_spells_one_key() -> None:
    need = Need.parse(" sme2 , svl>=256, soc=MT6993")
    assert need == Need(sme2=True, min_svl=256, soc="MT6993")
    assert need.key() == "sme2,svl>=256,soc=MT6993"
    assert Need.parse(need.key()) == need
    assert Need.parse("") == Need.parse("any") == Need()
    assert Need().key() == "any"
    assert Need.parse("no-sme2").sme2 is False


def test_an_unknown_need_is_a_usage_error_listing_the_allowed_terms() -> None:
    with pytest.raises(ConfigError, match=r"'fast' is not a device need; allowed.*svl>=BITS"):
        Need.parse("sme2,fast")


def test_a_marker_need_adds_to_the_sessions() -> None:
    assert Need(sme2=True).merged(Need(min_svl=512)) == Need(sme2=True, min_svl=512)
    assert Need(sme2=True).merged(Need(sme2=False)) == Need(sme2=False)


def test_routing_by_capability_says_why_a_device_does_not_serve() -> None:
    pool = (SME2, NOSME)
    assert serving(Need(sme2=True), pool) == (SME2,)
    assert serving(Need(sme2=False), pool) == (NOSME,)
    assert serving(Need(), pool) == pool
    assert serving(Need(soc="sm8650"), pool) == (NOSME,)
    assert serving(Need(device="EmuPhone_SME2"), pool) == (SME2,)
    assert Need(min_svl=1024).unmet(SME2) == "its SVL is 512 bit, below 1024"
    assert Need(min_svl=128).unmet(NOSME) == "its SVL is unknown, below 128"  # an unknown fact never serves
    reason = why_none(Need(sme2=True, min_svl=1024), pool, (LeftOut("adb", "X", "unauthorized"),))
    assert reason == ("no device of the pool can run it (needs sme2,svl>=1024): EmuPhone_SME2: its SVL is 512 bit, "
                      "below 1024; EmuPhone_noSME: it has no SME2 (1 device(s) left out of the pool: see the pool's "
                      "lines at the session's start)")


def test_entries_travel_to_workers_as_plain_data() -> None:
    found = Discovery((SME2, NOSME), (LeftOut("adb", "emulator-5554", "offline: reconnect"),))
    assert Discovery.from_dict(found.to_dict()) == found
    with pytest.raises(ConfigError, match="different pytest-sme2 versions"):
        PoolEntry.from_dict({**SME2.to_dict(), "version": 99})


def test_two_phones_of_one_model_get_names_of_their_own() -> None:
    twin = PoolEntry("EmuPhone SME2", "adb", "127.0.0.1:40009", "android")
    named = unique_names([twin, PoolEntry("EmuPhone SME2", "adb", "127.0.0.1:40003", "android")])
    assert [(e.name, e.address) for e in named] == [("EmuPhone_SME2", "127.0.0.1:40003"),
                                                    ("EmuPhone_SME2_2", "127.0.0.1:40009")]


def test_a_name_has_no_dash_pytest_joins_a_tests_parameters_with() -> None:
    assert entry_name("Pixel 9-Pro (USB)") == "Pixel_9_Pro_USB"


def test_an_entry_makes_its_runners_options() -> None:
    options = SME2.runner_options(Sme2Options(device="local", pool=("adb",)))
    assert (options.device, options.serial) == ("android", "127.0.0.1:40001")


def test_a_source_that_fails_as_a_whole_is_left_out_and_the_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.errors import DeviceError
    from pytest_sme2.runners import pool

    monkeypatch.setattr(pool, "_SOURCES", dict(pool._SOURCES))  # this test's sources are gone after it

    def broken(options: Sme2Options, progress: object) -> Discovery:
        raise DeviceError("cannot reach the adb server: start it with `adb start-server`")

    def one(options: Sme2Options, progress: object) -> Discovery:
        return Discovery((NOSME,))

    register_source("test-broken", broken)
    register_source("test-one", one)
    found = discover(Sme2Options(pool=("test-broken", "test-one")))
    assert found.entries == (NOSME,)
    why = "cannot reach the adb server: start it with `adb start-server`"
    assert found.left_out == (LeftOut("test-broken", "", why),)
    lines = found.lines()
    assert lines[0] == "sme2 device pool: 1 device(s), 1 left out"
    assert lines[2].startswith("  left out: test-broken (the source): cannot reach")


def test_an_unknown_source_is_a_usage_error() -> None:
    with pytest.raises(ConfigError, match="'usb' is not a device source"):
        discover(Sme2Options(pool=("usb",)))


def test_the_adb_sources_extra_facts() -> None:
    text = "@@svl\n64\n@@uid\n2000\n@@su\n@@governor\nschedutil\nschedutil\nperformance\n@@end\n"
    assert pool_facts(text) == (512, False, "performance/schedutil")
    assert pool_facts("@@svl\n@@uid\n0\n@@su\n@@governor\n@@end\n") == (None, True, "")
    assert pool_facts("@@svl\n@@uid\n2000\n@@su\n/system/xbin/su\n@@governor\n@@end\n")[1] is True
    assert pool_facts("") == (None, None, "")
