"""The Android runner: ``executor_runner`` builds pushed to a phone over adb, run pinned, traces pulled back.

One concern per module, in the order a run uses them:

- :mod:`.selection` — which device: ``--sme2-serial`` (a comma-separated list gives one device per
  pytest-xdist worker), else ``$ANDROID_SERIAL``, else the only attached device.
- :mod:`.adb` — the link to that device (:class:`~.adb.AdbLink`): every adb failure becomes a
  :class:`~pytest_sme2.errors.DeviceError` or :class:`~pytest_sme2.errors.RunnerError` naming the
  serial and the fix; every device command is built from ``shlex.quote``-d arguments.
- device facts (props, ``/proc/cpuinfo``, cpufreq, thermal, battery) are read in one round trip and
  parsed in :mod:`pytest_sme2.device.facts` (:func:`~pytest_sme2.device.facts.device_info_from_facts`), like a
  host's, into a :class:`~pytest_sme2.device.facts.DeviceInfo` and its identity.
- :mod:`.deploy` — files on the device by content, under ``/data/local/tmp/pytest_sme2``:
  ``<sha256[:16]>/<file name>``, pushed to a ``.part`` name, verified with ``sha256sum`` on the device,
  renamed into place, then marked; ``runs/<unique id>/`` holds one run's trace.
- :mod:`.conditions` — the big-core ``taskset`` mask, thermal status and validity, fixed performance mode.
- :mod:`.run` — one execution: the command, shell v2 with a device-side ``timeout``, exit codes
  explained, the trace checked before it is pulled.
- :mod:`.runner` — :class:`AndroidRunner`, which puts these together; a failed run never returns a result.
"""

from __future__ import annotations

from pytest_sme2.device.facts import ANDROID_FACTS_SCRIPT as FACTS_SCRIPT
from pytest_sme2.device.facts import device_info_from_facts, parse_battery, parse_getprop
from pytest_sme2.runners.android.adb import COMMAND_TIMEOUT, AdbLink
from pytest_sme2.runners.android.conditions import (
    HOT_STATUS,
    THERMAL_NAMES,
    parse_mask,
    thermal_invalid_reason,
    thermal_name,
)
from pytest_sme2.runners.android.deploy import REMOTE_ROOT, Deployed
from pytest_sme2.runners.android.run import TIMEOUT_EXIT
from pytest_sme2.runners.android.runner import AndroidRunner
from pytest_sme2.runners.android.selection import (
    AttachedDevice,
    choose_serial,
    parse_serials,
    state_error,
    worker_index,
)

__all__ = [
    "COMMAND_TIMEOUT", "FACTS_SCRIPT", "HOT_STATUS", "REMOTE_ROOT", "THERMAL_NAMES", "TIMEOUT_EXIT",
    "AdbLink", "AndroidRunner", "AttachedDevice", "Deployed", "choose_serial", "device_info_from_facts",
    "parse_battery", "parse_getprop", "parse_mask", "parse_serials", "state_error", "thermal_invalid_reason",
    "thermal_name", "worker_index",
]
