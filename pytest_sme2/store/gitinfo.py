"""The commit and branch a run measured: from git in the project, else from CI variables, else "none".

In CI a checkout may have no ``.git`` (a tarball, a container) or a detached HEAD (``actions/checkout`` on a PR
checks out the merge commit): the CI variables then name what ran. Without either the run is still stored,
with ``commit_source = "none"`` so every view can say the commit is unknown rather than guess.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: (commit variable, branch variables) per CI, in the order they are tried.
CI_COMMIT_VARS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GITHUB_SHA", ("GITHUB_HEAD_REF", "GITHUB_REF_NAME")),
    ("CI_COMMIT_SHA", ("CI_COMMIT_REF_NAME",)),  # GitLab
    ("BUILDKITE_COMMIT", ("BUILDKITE_BRANCH",)),
    ("CIRCLE_SHA1", ("CIRCLE_BRANCH",)),
    ("GIT_COMMIT", ("GIT_BRANCH",)),  # Jenkins
)


@dataclass(frozen=True)
class CommitInfo:
    commit: str = ""
    branch: str = ""
    source: str = "none"
    dirty: bool = False


def git(args: list[str], cwd: Path, timeout: float = 10) -> str | None:
    """``git <args>`` in ``cwd``: its stripped stdout, or None when git is missing or fails."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def commit_info(cwd: Path, environ: Mapping[str, str] | None = None) -> CommitInfo:
    """What ran: HEAD of the git work tree at ``cwd``; else the first CI commit variable set; else nothing."""
    env = os.environ if environ is None else environ
    head = git(["rev-parse", "HEAD"], cwd)
    if head:
        branch = git(["rev-parse", "--abbrev-ref", "HEAD"], cwd) or ""
        if branch in ("", "HEAD"):  # detached (CI checkouts): the CI knows the branch
            branch = next((env[v] for _, names in CI_COMMIT_VARS for v in names if env.get(v)), "")
        status = git(["status", "--porcelain", "--untracked-files=no"], cwd)
        return CommitInfo(commit=head, branch=branch, source="git", dirty=bool(status))
    for var, branch_vars in CI_COMMIT_VARS:
        if env.get(var):
            branch = next((env[v] for v in branch_vars if env.get(v)), "")
            return CommitInfo(commit=env[var], branch=branch, source=f"env:{var}")
    return CommitInfo()
