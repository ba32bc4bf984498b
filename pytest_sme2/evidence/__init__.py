"""Pure readers of what a run leaves behind: ETDump traces, operator categories, kernel logs, SME2 evidence,
QEMU logs, ELF files, numerics, and nothing that decides."""
