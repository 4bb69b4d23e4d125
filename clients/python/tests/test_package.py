"""The package: `pip install` of clients/python works (offline, with Debian's pip and setuptools), installs
the typed package with no runtime dependency, and the source imports nothing outside the standard library."""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import edge_limiter

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "edge_limiter"


class Package(unittest.TestCase):
    def test_pip_installs_it(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            # A copy, so the build leaves nothing in the checkout.
            project = Path(tmp) / "project"
            shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns("tests", "examples", "build", "*.egg-info", "__pycache__"))
            venv = Path(tmp) / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
            python = str(venv / "bin" / "python")
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            install = subprocess.run(
                # --no-build-isolation: setuptools comes from the system, not from an index (none is reachable here).
                [python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "--quiet", str(project)],
                env=env, capture_output=True, text=True,
            )
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
            probe = subprocess.run(
                [python, "-c", "import edge_limiter, importlib.metadata as m, pathlib; "
                 "print(edge_limiter.__file__); print(m.version('edge-limiter')); print(m.requires('edge-limiter')); "
                 "print((pathlib.Path(edge_limiter.__file__).parent / 'py.typed').is_file())"],
                env=env, cwd=tmp, capture_output=True, text=True,
            )
            self.assertEqual(probe.returncode, 0, probe.stderr)
            where, version, requires, typed = probe.stdout.split("\n")[:4]
            self.assertTrue(where.startswith(str(venv)), where)
            self.assertEqual(version, edge_limiter.__version__)
            self.assertEqual(requires, "None")  # no runtime dependencies
            self.assertEqual(typed, "True")

    def test_the_source_imports_the_standard_library_only(self) -> None:
        imported: set = set()
        for file in SOURCE.glob("*.py"):
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.Import):
                    imported.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    imported.add(node.module.split(".")[0])
        self.assertTrue(imported)
        self.assertEqual(sorted(m for m in imported if m not in sys.stdlib_module_names and m != "__future__"), [])


if __name__ == "__main__":
    unittest.main()
