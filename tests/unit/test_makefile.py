"""The Makefile's install step: the wrong Python fails at once naming the version needed, and
a .venv left by an install that did not finish is rebuilt, not reused. Run against a copy of
the Makefile with a stand-in interpreter, so nothing real is installed."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/sh
case "$1" in
  -c) exit {check_status} ;;
  --version) echo "Python {version}" ;;
  -m) if [ "$2" = venv ]; then
        mkdir -p "$3/bin"
        printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/python"
        chmod +x "$3/bin/python"
        echo new > "$3/created-by-venv"
      fi ;;
esac
"""


def _project_copy(tmp_path: Path, version: str, check_status: int) -> Path:
    project = tmp_path / "project"
    (project / "libs/seglog/records").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", project / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    for source in ("_scan.c", "_encode.c"):  # the compiled extensions the install builds
        shutil.copy(ROOT / "libs/seglog/records" / source, project / "libs/seglog/records" / source)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(version=version, check_status=check_status))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return project


def _make_install(project: Path, python: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(project), "install", f"PYTHON={python}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_old_python_fails_at_once_naming_the_version_needed(tmp_path):
    project = _project_copy(tmp_path, "3.9.18", check_status=1)
    result = _make_install(project, tmp_path / "python")
    assert result.returncode != 0
    assert "seglog needs Python 3.11 or newer" in result.stderr
    assert "Python 3.9.18" in result.stderr
    assert not (project / ".venv").exists()


def test_a_venv_from_an_unfinished_install_is_rebuilt(tmp_path):
    project = _project_copy(tmp_path, "3.11.9", check_status=0)
    broken = project / ".venv" / "bin"
    broken.mkdir(parents=True)
    (broken / "python").write_text("#!/bin/sh\nexit 1\n")
    (broken / "python").chmod(0o755)
    result = _make_install(project, tmp_path / "python")
    assert result.returncode == 0, result.stderr
    assert "removing .venv" in result.stderr
    assert (project / ".venv" / "created-by-venv").exists()  # a new venv, not the old one
    assert (project / ".venv" / ".installed").exists()
