"""A client's source tree at a pinned commit, for the conformance harnesses (kafkajs, aiokafka, kafka-python).

Where it comes from: a git directory (by default the snapshot our `fetch` tool makes under /work/.mirror/), exported
with `git archive` into DIR when DIR is missing, with a mark file naming the commit (an export has no .git); a DIR
that is there is checked to be at the pinned commit (a git clone or an earlier export), and anything else is a
one-line error naming how to get it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PinnedSource:
    name: str  # "kafkajs", as the errors name it
    repo: str  # "tulios/kafkajs": GitHub's owner/name (the fetch tool's source and the clone URL)
    commit: str
    mark: str  # the file an export gets, naming its commit (".kafkajs-commit")

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}"

    def commit_of(self, dest: Path) -> str | None:
        """The commit `dest` holds: a clone's HEAD, or an export's mark; None if neither says."""
        if (dest / ".git").exists():
            rev = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], capture_output=True, text=True)
            return rev.stdout.strip() or None
        mark = dest / self.mark
        return mark.read_text().strip() if mark.exists() else None

    def checkout(self, dest: Path, mirror: Path) -> None:
        """`dest` at the pinned commit: exported from `mirror` if missing, checked if there; SystemExit otherwise."""
        if not dest.exists():
            if not (mirror / "HEAD").exists():
                raise SystemExit(
                    f"error: no {self.name} in {dest} and no git directory at {mirror}; get it with our `fetch` tool "
                    f"(github:{self.repo}) or: git clone {self.url} {dest} && git -C {dest} checkout {self.commit}"
                )
            dest.mkdir(parents=True)
            archive = subprocess.Popen(
                ["git", "--git-dir", str(mirror), "archive", self.commit], stdout=subprocess.PIPE
            )
            subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                shutil.rmtree(dest)
                raise SystemExit(f"error: {mirror} has no commit {self.commit}; fetch a newer snapshot")
            (dest / self.mark).write_text(self.commit + "\n")
        have = self.commit_of(dest)
        if have != self.commit:
            raise SystemExit(f"error: {dest} holds {self.name} {have or 'of unknown commit'}, not {self.commit}")
