"""The history store read for drift calibration: each test's trusted session medians on each device identity.

:func:`gate.calibration.calibrate` turns one series into an allowance; this module only reads the store, once
per session (:class:`HistoryCalibration` is called for every test judged against another session's samples).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from pytest_sme2.gate.calibration import DriftCalibration, calibrate
from pytest_sme2.history.series import UNTRUSTED
from pytest_sme2.history.store import HistoryError, HistoryStore


class HistoryCalibration:
    """``calibration(test_id, identity_id)``: the drift calibration of the history at ``root`` (read on first use)."""

    def __init__(self, root: str | Path, *, confidence: float = 0.95) -> None:
        self.root = Path(root)
        self.confidence = confidence
        self._series: dict[tuple[str, str], list[tuple[str, float]]] | None = None
        self._error = ""

    def _read(self) -> dict[tuple[str, str], list[tuple[str, float]]]:
        if self._series is None:
            series: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
            try:
                runs = HistoryStore(self.root).runs()
            except HistoryError as exc:
                self._error = str(exc)
                runs = []
            for stored in runs:
                for rec in stored.records:
                    # Disturbed or failed runs measure the disturbance, not the machine's session-to-session move.
                    if rec.status not in UNTRUSTED and rec.median_ms and rec.artifact_id:
                        series[(rec.test_id, rec.identity_id)].append((rec.artifact_id, rec.median_ms))
            self._series = dict(series)
        return self._series

    def __call__(self, test_id: str, identity_id: str) -> DriftCalibration:
        points = self._read().get((test_id, identity_id), [])
        if self._error:
            return DriftCalibration(source=str(self.root), why=f"the history cannot be read: {self._error}")
        return calibrate(points, confidence=self.confidence, source=str(self.root))


__all__ = ["HistoryCalibration"]
