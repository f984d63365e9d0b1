"""Outboard as a Python package: what builds it from a fresh clone or an sdist, and the manylinux wheel."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from typing import Sequence

import pytest

import outboard
from outboard import machine

REPO = Path(__file__).resolve().parents[2]
UCD8 = REPO / ".venv" / "share" / "outboard" / "unicodedata2-8.0.0.tar.gz"


def test_the_committed_unicode_tables_are_what_the_generator_makes() -> None:
    pytest.importorskip("unicodedata2", reason="scripts/bootstrap.sh installs the pinned unicodedata2")
    if not UCD8.exists():
        pytest.skip(f"{UCD8} is missing: scripts/bootstrap.sh downloads it")
    done = subprocess.run([sys.executable, REPO / "scripts" / "gen_unicode_tables.py", "--check", UCD8],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 3:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stdout + done.stderr


def _version_line_problem(line: str, program: str) -> str | None:
    """None when ``line`` is "<program> <version>, UCX x.y.z (<an existing libucp file>)"."""
    m = re.fullmatch(rf"{program} {re.escape(outboard.__version__)}, UCX \d+\.\d+\.\d+ \((/\S*libucp\.so[.\d]*)\)", line)
    if m is None:
        return f"{line!r} is not '{program} {outboard.__version__}, UCX x.y.z (/path/libucp.so...)'"
    return None if Path(m.group(1)).exists() else f"{m.group(1)} does not exist"


def test_the_agent_and_the_cli_name_their_version_and_the_ucx_file_they_loaded() -> None:
    agent = subprocess.run([outboard.agent_executable(), "--version"], capture_output=True, text=True, timeout=30)
    cli = subprocess.run([Path(sys.executable).parent / "outboard", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert agent.returncode == 0 and cli.returncode == 0, (agent.stderr, cli.stderr)
    assert _version_line_problem(agent.stdout.strip(), "outboard-agent") is None
    assert _version_line_problem(cli.stdout.strip(), "outboard") is None
    assert machine.describe()["outboard"] == outboard.__version__


TEXTS = ["Hello, world! It's 2026.", "naïve café – 東京 ☃\n\n  spaces", "x" * 5000]
# Run by the fresh venv's Python, outside the clone: the installed package, its agent and its libraries
# (each version line names the UCX file it loaded). It prints what the test checks against this tree's build.
SMOKE = r"""
import hashlib, json, os, subprocess, sys
import numpy as np
import outboard
texts = json.loads(sys.argv[1])
out = {"module": outboard.__file__, "version": outboard.__version__, "agent": outboard.agent_executable(),
       "agent_version": subprocess.run([outboard.agent_executable(), "--version"], capture_output=True,
                                       text=True, check=True).stdout.strip(),
       "cli_version": subprocess.run([os.path.join(os.path.dirname(sys.executable), "outboard"), "--version"], capture_output=True,
                                     text=True, check=True).stdout.strip()}
with outboard.connect() as client:
    payloads = [os.urandom(n) for n in (1, 4096, 65536)]
    out["echo"] = [client.request("echo", p) == p for p in payloads]
    for model in ("gpt2", "bert-base-uncased"):
        batch = client.tokenizer(model, placement="agent").encode_batch(texts)
        assert batch.ok, batch.errors
        out[model] = [batch[i].tolist() for i in range(len(texts))]
g = outboard.Graph("smoke")
sha, copy = g.add_engine("sha", "sha256"), g.add_engine("copy", "dma")
g.add_dependency(sha, copy)
g.freeze()
src, dst, digest = np.arange(4096, dtype=np.uint32).view(np.uint8), np.zeros(16384, np.uint8), np.zeros(32, np.uint8)
inst = g.instance()
inst.set_sha256(sha, src, digest)
inst.set_copy(copy, src, dst)
with outboard.Executor(threads=1) as ex:
    ex.submit(inst)
    ex.wait(inst, timeout=30)
out["graph"] = bytes(digest) == hashlib.sha256(src.tobytes()).digest() and np.array_equal(src, dst)
print(json.dumps(out))
"""


def _run(cmd: list, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _smoke(venv: Path, tmp_path: Path, wrap: Sequence[str] = ()) -> dict:
    """SMOKE's findings, run by `venv`'s Python (inside `wrap`, a command that runs the rest)."""
    smoke = tmp_path / "smoke.py"
    smoke.write_text(SMOKE)
    return json.loads(_run([*wrap, venv / "bin" / "python", smoke, json.dumps(TEXTS)], tmp_path, 300).stdout)


def _check_smoke(out: dict, venv: Path) -> None:
    assert Path(out["module"]).is_relative_to(venv) and Path(out["agent"]).is_relative_to(venv), out
    assert out["version"] == outboard.__version__
    assert _version_line_problem(out["agent_version"], "outboard-agent") is None
    assert _version_line_problem(out["cli_version"], "outboard") is None
    assert out["echo"] == [True, True, True] and out["graph"] is True
    for model in ("gpt2", "bert-base-uncased"):
        local = outboard.offload.open_local(model)
        assert out[model] == [local.encode(t).tolist() for t in TEXTS], model


# The system's own copies of what the wheel must not need: UCX (its libraries and modules), libsodium, xxhash.
SYSTEM_LIBS = Path("/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")
HIDDEN = ["libucp.so*", "libucs.so*", "libuct.so*", "libucm.so*", "libsodium.so*", "libxxhash.so*"]


def _without_system_libraries() -> list[str]:
    """A command prefix that runs the rest in a mount namespace where HIDDEN are empty files; [] where
    namespaces cannot be made (not root): the version lines still show which libucp was loaded."""
    hide = " ".join(f"mount --bind /dev/null {f};" for pattern in HIDDEN for f in map(str, SYSTEM_LIBS.glob(pattern))
                    if not Path(f).is_symlink())
    script = f'set -e; {hide} if [ -d {SYSTEM_LIBS}/ucx ]; then mount -t tmpfs none {SYSTEM_LIBS}/ucx; fi; exec "$@"'
    wrap = ["unshare", "--mount", "sh", "-c", script, "hidden"]
    try:
        ok = subprocess.run([*wrap, "true"], capture_output=True, timeout=30).returncode == 0
    except FileNotFoundError:
        ok = False
    return wrap if ok else []


# What the sdist must hold: every tracked file a build of any configuration reads (the manylinux build
# below leaves out the MPI interposer and the graph benchmark, so their sources are checked here).
BUILD_INPUTS = ("CMakeLists.txt", "pyproject.toml", "README.md", "apps/", "bench/", "cmake/", "include/", "python/",
                "src/")


@pytest.mark.slow  # a whole build with zig, about 4 minutes on 2 cores
def test_the_sdist_alone_builds_the_manylinux_wheel_which_runs_on_the_libucx_wheel_alone(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="scripts/bootstrap.sh installs `build` (python -m build)")
    if platform.machine() != "x86_64":
        pytest.skip(f"the manylinux wheel is built on x86_64, this is {platform.machine()}")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, REPO], REPO, 300)
    sdist = next(dist.glob("outboard-*.tar.gz"))
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    tracked = _run(["git", "ls-files", *BUILD_INPUTS], REPO, 60).stdout.split()
    assert tracked and not set(tracked) - names, sorted(set(tracked) - names)[:20]
    assert not any(n.startswith((".venv/", "build/")) for n in names)

    # pip builds the sdist in isolation (scikit-build-core and nanobind from the index), with zig.
    done = _run(["bash", REPO / "scripts" / "manylinux-wheel.sh", dist, sdist], REPO, 1500)
    wheel = Path(done.stdout.strip().splitlines()[-1])
    assert wheel.name.startswith(f"outboard-{outboard.__version__}-") and wheel.name.endswith("manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        meta = z.read(next(n for n in files if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: libucx-cu13>=1.22.0,<1.23" in meta.splitlines()
    assert any(n.endswith("/scripts/outboard-agent") for n in files)
    assert not any("libucp" in n or n.endswith((".a", ".h")) for n in files), "UCX comes from libucx-cu13"

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp_path, 120)
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], tmp_path, 600)
    out = _smoke(venv, tmp_path, _without_system_libraries())
    _check_smoke(out, venv)
    # Both the agent and the extension loaded the libucx wheel's libucp (the version lines name the file).
    ucx = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "libucx" / "lib"
    for line in (out["agent_version"], out["cli_version"]):
        assert ", UCX 1.22." in line and f"({ucx}/libucp.so" in line, (line, ucx)
