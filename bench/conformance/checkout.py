"""A client's source tree at a pinned commit, for the conformance harnesses (kafkajs, aiokafka, kafka-python,
confluent-kafka-python), and the venv its pytest suite runs in.

Where it comes from: a git directory (by default the snapshot our `fetch` tool makes under /work/.mirror/), exported
with `git archive` into DIR when DIR is missing, with a mark file naming the commit (an export has no .git); a DIR
that is there is checked to be at the pinned commit (a git clone or an earlier export), and anything else is a
one-line error naming how to get it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
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


@dataclass(frozen=True)
class SuiteVenv:
    """A client suite's own venv, DIR/.venv (nothing of it leaks into ours), made by the interpreter Kafka Lite runs
    on and filled from PyPI once per set of requirements: `stale` says whether `requirements` (their text, or
    anything naming them) differ from what the venv was last filled with; `create` makes it anew with pip upgraded
    and returns the pip command to fill it; `done` records `requirements` as installed."""

    dest: Path
    what: str  # "aiokafka's test dependencies", as the progress line names them

    @property
    def python(self) -> Path:
        return self.dest / ".venv" / "bin" / "python"

    @property
    def _stamp(self) -> Path:
        return self.dest / ".venv" / ".kafkalite-installed"

    def stale(self, requirements: str) -> bool:
        return not self._stamp.exists() or self._stamp.read_text().strip() != _digest(requirements)

    def create(self, env: dict[str, str] | None = None, *extra_tools: str) -> list[str]:
        print(f"installing {self.what} into {self.dest / '.venv'} (pip)...", file=sys.stderr)
        base = getattr(sys, "_base_executable", sys.executable)  # the interpreter our venv was made from
        subprocess.run([base, "-m", "venv", str(self.dest / ".venv")], check=True)
        pip = [str(self.python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip", *extra_tools], check=True, env=env)
        return pip

    def done(self, requirements: str) -> None:
        self._stamp.write_text(_digest(requirements) + "\n")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
