"""An emulated Android phone for end-to-end tests of the Android path without hardware.

plugin/library -> adbutils -> the real adb server -> TCP on 127.0.0.1 -> `adbd.Adbd` (this package)
-> commands in a bubblewrap sandbox laid out like Android (`rootfs`, `sandbox`), per `profiles`.
The pytest fixtures live in `fixtures`.
"""
