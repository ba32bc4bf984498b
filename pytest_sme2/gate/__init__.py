"""Deciding, purely from numbers: verdict values, checks, the comparison rule, statistics, drift calibration,
memory thresholds and the suite's false-alarm budget. Nothing here runs a model."""
