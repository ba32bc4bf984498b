"""Measuring: the plan (recipe), the block engine (blocks), assembling a Profile (profile), pairs measured together
(pair: SME2 on/off, backends, a change beside its baseline's artifact), stopping rules (sequential), the host's
measuring lock (hostlock), and rebuilding a baseline's own program to measure beside the change (rebuild)."""
