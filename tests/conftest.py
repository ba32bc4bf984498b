"""Shared test configuration.

The emulated Android device tier (real adb server + Python adbd + bubblewrap sandbox) is a
fixture plugin in ``tests/emulated_device``; ``tests/`` has no ``__init__.py``, so pytest puts it on
``sys.path`` and the plugin is importable as ``emulated_device.fixtures``.
"""

pytest_plugins = ["emulated_device.fixtures"]
