"""Measuring: the plan and block engine (profile), pairs (SME2 on/off, backends), stopping rules, the host's
measuring lock, and rebuilding a baseline's own program to measure beside the change."""
