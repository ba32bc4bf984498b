"""One schema-version check (errors.check_schema_version) and one reader of stored JSON (store.files.read_json).

Every stored document that pytest-sme2 reads back says the same thing about a version it cannot read: the file, the
version found, the version this pytest-sme2 reads and the fix. Before, seven copies said it seven ways (the history
store: "history schema 99 is newer ..."; an analysis: "... understands (1)").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import ConfigError, Sme2Error, check_schema_version, unreadable
from pytest_sme2.history.records import KIND as HISTORY_KIND
from pytest_sme2.history.store import read_run
from pytest_sme2.results import load_results
from pytest_sme2.store.baseline import BaselineStore
from pytest_sme2.store.files import read_json

pytestmark = pytest.mark.fast


def _history_run(path: Path, version: Any) -> Callable[[], object]:
    path.write_text(json.dumps({"kind": HISTORY_KIND, "schema_version": version}) + "\n")
    return lambda: read_run(path)


def _results(path: Path, version: Any) -> Callable[[], object]:
    path.write_text(json.dumps({"schema_version": version, "tests": []}))
    return lambda: load_results(path)


def _baseline(path: Path, version: Any) -> Callable[[], object]:
    path.write_text(json.dumps({"schema_version": version}))
    return lambda: BaselineStore(path.parent).read(path)


READERS = {"history run": _history_run, "results file": _results, "baseline": _baseline}


@pytest.mark.parametrize("what", list(READERS))
def test_a_newer_schema_reads_the_same_in_every_store(what: str, tmp_path: Path) -> None:
    path = tmp_path / "stored.json"
    with pytest.raises(Sme2Error) as info:
        READERS[what](path, 99)()
    message = str(info.value)
    assert f"{what} {path} has schema_version 99, newer than this pytest-sme2 reads (" in message
    assert "upgrade pytest-sme2 (pip install -U pytest-sme2; this is " in message


@pytest.mark.parametrize("what", list(READERS))
@pytest.mark.parametrize(("version", "found"), [("2", "found schema_version '2'"), (0, "versions start at 1")])
def test_a_version_that_is_not_ours_names_the_file_and_what_was_found(what: str, version: Any, found: str,
                                                                     tmp_path: Path) -> None:
    path = tmp_path / "stored.json"
    with pytest.raises(Sme2Error) as info:
        READERS[what](path, version)()
    message = str(info.value)
    assert f"{what} {path} has " in message and found in message and f"so it is not a pytest-sme2 {what}" in message


def test_a_document_without_a_version_is_the_callers_choice() -> None:
    assert check_schema_version({}, reads=2, what="analysis", missing=2) == 2
    with pytest.raises(ConfigError, match=r"^results file r\.json has no integer schema_version \(none at all\), "
                                          r"so it is not a pytest-sme2 results file; pass the file"):
        check_schema_version({}, reads=1, what="results file", source="r.json", fix="pass the file")


def test_read_json_names_the_file_what_is_wrong_and_the_fix(tmp_path: Path) -> None:
    fix = "write it again"
    cases = {"missing.json": None, "binary.json": b"\xff\xfe\x00", "cut.json": b'{"schema_version": 1, "te'}
    expected = {"missing.json": "does not exist; write it again",
                "binary.json": "is not UTF-8 text (byte 0), so not a pytest-sme2 store file; write it again",
                "cut.json": "is not valid JSON (line 1, column 23: "}
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(ConfigError) as info:
            read_json(path, what="store file", fix=fix)
        assert str(info.value).startswith(f"store file {path} {expected[name]}")
        assert str(info.value).endswith(" write it again")
    with pytest.raises(ConfigError, match="is a directory; pass the JSON file inside it"):
        read_json(tmp_path, what="store file", fix=fix)


def test_unreadable_says_why_in_the_systems_words(tmp_path: Path) -> None:
    err = unreadable(tmp_path / "t", PermissionError(13, "Permission denied"), what="trace file", fix="f",
                     inside=".etdump")
    assert str(err) == f"cannot read trace file {tmp_path / 't'}: Permission denied"
