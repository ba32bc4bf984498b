"""What the user stores and the project caches: atomic files and locks, baselines, the artifact store, git facts."""
