"""Where a result came from: the git commit of the code that produced it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(repo: Path | None = None) -> str:
    """The checked-out commit (with ``-dirty`` when the tree has changes outside ``results/``), or
    "unknown" outside git. ``results/`` holds data, not code: a study writing or resuming its folder
    there does not make the code that runs it dirty."""
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ":/", ":(exclude,top)results"], cwd=cwd,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
