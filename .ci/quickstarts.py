"""Run README.md's quickstarts, as written, against the installed pyro_pt / pyro_subnet.

``make test-wheel`` runs this with the interpreter of a fresh venv that has the built wheel
installed (not editable). Each quickstart's ```python block is taken from README.md at run time
and run in its own process from a temporary directory outside the repository, so that the source
tree is not importable and nothing the code writes lands in the repository.

Usage: python .ci/quickstarts.py [README.md]
"""

import os
import subprocess
import sys
import sysconfig
import tempfile
import time

HEADINGS = ["## Quickstart: parallel tempering", "## Quickstart: subnetwork Laplace"]


def extract(readme, heading):
    """The first ```python block between ``heading`` and the next ``## `` heading, and the line
    number (1-based) of its first line of code."""
    lines = readme.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        sys.exit(f"README.md has no heading {heading!r} (renamed? update .ci/quickstarts.py)")
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        if lines[i].strip() == "```python":
            end = lines.index("```", i + 1)
            return "\n".join(lines[i + 1 : end]) + "\n", i + 2
    sys.exit(f"README.md: no ```python block under {heading!r}")


def check_installed():
    """pyro_pt and pyro_subnet come from this venv's site-packages, not from a source tree."""
    if sys.prefix == sys.base_prefix:
        sys.exit(f"{sys.executable} is not a virtual environment's interpreter")
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    for name in ("pyro_pt", "pyro_subnet", "pyro_arviz"):
        module = __import__(name)
        where = os.path.realpath(module.__file__)
        if not where.startswith(site + os.sep):
            sys.exit(f"{name} was imported from {where}, not from the venv's {site}")
        print(f"{name}: {where}")


def main():
    readme_path = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "README.md")
    with open(readme_path) as f:
        readme = f.read()
    blocks = [(heading, *extract(readme, heading)) for heading in HEADINGS]
    with tempfile.TemporaryDirectory(prefix="quickstarts-") as tmp:
        os.chdir(tmp)  # before the imports: the cwd is on sys.path for `python -c` and the REPL
        check_installed()
        for n, (heading, code, line) in enumerate(blocks):
            script = os.path.join(tmp, f"quickstart_{n}.py")
            # blank lines in front keep the traceback's line numbers those of README.md
            with open(script, "w") as f:
                f.write("\n" * (line - 1) + code)
            print(f"{heading[3:]} (README.md line {line}) ...", end=" ", flush=True)
            start = time.perf_counter()
            # the output (progress bars, the tempering report) is shown only when the run fails
            proc = subprocess.run(
                [sys.executable, script], cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            if proc.returncode:
                print(f"failed\n{proc.stdout.decode(errors='replace')}", flush=True)
                sys.exit(f"README.md's {heading[3:]!r} failed (its output above)")
            print(f"ran in {time.perf_counter() - start:.0f} s", flush=True)
    print(f"{len(blocks)} quickstarts ran")


if __name__ == "__main__":
    main()
