"""The MPI interposer (src/mpi) under real mpirun and a real agent, for each MPI installed: an
unmodified program (tests/mpi/collectives.c, built here by that MPI's mpicc) runs every collective
Outboard may offload, checks each against the MPI library's blocking result and completes them
with every completion call; the report says what was offloaded, what passed through and why."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from outboard import mpi
from outboard._agent import LocalAgent
from outboard.errors import NotFound

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "mpi" / "collectives.c"
FORTRAN = ROOT / "tests" / "mpi" / "collectives.F90"
ASAN_BUILD = ROOT / "build" / "asan"
RUN_TIMEOUT_S = 120
ROUNDS = 3
COMMS = 3  # world, a duplicate, a split
MPICC = {"openmpi": "mpicc.openmpi", "mpich": "mpicc.mpich"}
MPIF90 = {"openmpi": "mpif90.openmpi", "mpich": "mpif90.mpich"}
# mpif.h declares no interfaces, so gfortran >= 10 rejects one buffer passed as two types.
FORTRAN_FLAVOURS = {"mpif.h": ["-fallow-argument-mismatch"], "use mpi": ["-DUSE_MPI_MODULE"],
                    "use mpi_f08": ["-DUSE_MPI_F08"]}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:  # CI runs as root; Open MPI refuses that unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def build(name: str, source: Path, tmp_path_factory) -> tuple[mpi.Mpi, Path]:
    """(MPI ``name``, ``source`` built with its mpicc), or a skip naming what is missing."""
    which = mpi.MPIS[name]
    cc = shutil.which(MPICC[which.name])
    if not cc:
        pytest.skip(f"{MPICC[which.name]} not installed ({which.package}: scripts/bootstrap.sh installs it)")
    try:
        mpi.interposer(which)
    except NotFound as e:
        pytest.skip(str(e))
    exe = tmp_path_factory.mktemp(which.name) / source.stem
    subprocess.run([cc, "-O1", "-Wall", "-Werror", "-o", str(exe), str(source)], check=True)
    return which, exe


@pytest.fixture(scope="module", params=sorted(mpi.MPIS))
def built(request, tmp_path_factory) -> tuple[mpi.Mpi, Path]:
    """(the MPI, the test program built with its mpicc)."""
    return build(request.param, PROGRAM, tmp_path_factory)


def _report_lines(stderr: str) -> dict[str, str]:
    """The report's operation lines after its heading: operation -> what happened to its calls."""
    report = stderr[stderr.index("outboard-mpi report:"):].splitlines()[1:]
    return {line.split()[0]: line.split(None, 1)[1] for line in report if line.split()[0].startswith("MPI_")}


def _buffers(stderr: str) -> tuple[int, int]:
    """What the report says of the ranks' buffers: (collectives in place, staged), summed over ranks."""
    found = re.search(r"^  buffers: (\d+) collectives in place \(kernel copies\), (\d+) staged$", stderr, re.M)
    return int(found.group(1)), int(found.group(2))


def _own_staging(stderr: str) -> tuple[int, int] | None:
    """What the report says of staging of their own: (collectives, regions allocated), summed over
    ranks, or None where it says nothing (none had any)."""
    found = re.search(r"^  staged in staging of their own: (\d+) collectives, in (\d+) regions allocated$", stderr,
                      re.M)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _offloaded(stderr: str) -> int:
    return sum(int(line.split()[0]) for line in _report_lines(stderr).values())


def _run_job(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """An MPI job (mpirun, or `outboard mpirun`) within RUN_TIMEOUT_S, in a process group of its own.
    At the timeout the group is told to end, and mpirun ends its ranks (each in a group of its own):
    subprocess.run's kill of the one process it started left a hung job's ranks spinning on
    through every later test."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or _env(),
                           start_new_session=True)
    try:
        out, err = job.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
        raise
    return subprocess.CompletedProcess(cmd, job.returncode, out, err)


def _outboard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return _run_job([sys.executable, "-m", "outboard.cli", *args], {**_env(), **(env or {})})


MIXED = 7  # Ialltoalls beside point-to-point, one per completion call


def _expected(ranks: int, offloaded: bool) -> dict[str, str]:
    """The report's lines for the test program: offloadable calls offloaded, or passed through as
    "no agent"; the rest passed through for their reasons, every rank once each."""
    each = ranks * ROUNDS * COMMS  # every rank calls each operation once per round and communicator

    def line(offloadable: int, *reasons: tuple[str, int]) -> str:
        why = [(r, n * ranks) for r, n in reasons] + ([] if offloaded else [("no agent", offloadable)])
        passed = sum(n for _, n in why)
        text = f"{offloadable if offloaded else 0} offloaded {passed:8} passed through"
        return text + (f" ({', '.join(f'{r}: {n}' for r, n in why)})" if why else "")

    unknown = "communicator not from world, dup, split, cart_create or cart_sub"
    return {
        "MPI_Ialltoall": line(each + ranks * MIXED, ("non-contiguous datatype", 1)),
        "MPI_Ialltoallv": line(each),
        "MPI_Iallgather": line(each, ("intercommunicator", 1)),
        "MPI_Ibcast": line(each, (unknown, 1)) if offloaded else line(each + ranks),
        "MPI_Iallreduce": line(each, ("datatype not int, long, float or double (C or Fortran)", 1),
                               ("op not sum, min, max or prod", 1)),
    }


@pytest.mark.parametrize("ranks,in_place", [(2, False), (3, True)], ids=["2-staged", "3-in-place"])
def test_every_collective_offloaded_to_the_agent_matches_the_blocking_one(built, ranks, in_place) -> None:
    """One agent serves the job: the ranks stage their buffers in shared memory, or, with
    OUTBOARD_MPI_EXPOSE=1, the agent reads and writes them in place (the kernel copies them)."""
    which, exe = built
    run = _outboard("mpirun", "-np", str(ranks), "--report", str(exe), str(ROUNDS),
                    env={"OUTBOARD_MPI_EXPOSE": "1"} if in_place else None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"ok {ROUNDS} rounds" in run.stdout
    assert "every operation passes through" not in run.stderr
    assert re.search(rf"^outboard-mpi report: {ranks} ranks on {which.family}", run.stderr, re.M)
    assert _report_lines(run.stderr) == _expected(ranks, offloaded=True)
    offloaded = _offloaded(run.stderr)
    assert _buffers(run.stderr) == ((offloaded, 0) if in_place else (0, offloaded)), run.stderr
    assert "stages every collective" not in run.stderr


@pytest.mark.parametrize("ranks", [2, 4])
def test_an_agent_per_rank_moves_the_data_agent_to_agent_and_matches_the_blocking_one(built, ranks) -> None:
    """Each rank's agent stands in for its node's: every collective spans the agents, which send each
    other their ranks' blocks over TCP (the split communicator's halves may share one)."""
    which, exe = built
    run = _outboard("mpirun", "-np", str(ranks), "--agents", "rank", "--report", str(exe), str(ROUNDS))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"ok {ROUNDS} rounds" in run.stdout
    assert "every operation passes through" not in run.stderr and "failed" not in run.stderr, run.stderr
    assert _report_lines(run.stderr) == _expected(ranks, offloaded=True)
    # World and its duplicate span the agents, so their agents reach the buffers in place; a split
    # half that one agent serves stages them.
    in_place, staged = _buffers(run.stderr)
    assert in_place + staged == _offloaded(run.stderr) and in_place > staged, run.stderr


def test_an_agent_that_cannot_reach_a_ranks_memory_gets_it_staged(built) -> None:
    """A rank whose UCX may not use posix shared memory does not ask its agent for it, so the agent
    does not check it for a process of its host and refuses its memory: MPI_Init's question fails,
    and every collective stages (through UCX), saying why. (Not UCX_TLS=tcp: MPICH's own finalize
    then hangs now and then, with or without the interposer.)"""
    _, exe = built
    run = _outboard("mpirun", "-np", "2", "--report", str(exe), "1",
                    env={"OUTBOARD_MPI_EXPOSE": "1", "UCX_TLS": "^posix"})
    assert run.returncode == 0 and "ok 1 rounds" in run.stdout, run.stdout + run.stderr
    assert _buffers(run.stderr) == (0, _offloaded(run.stderr)) != (0, 0), run.stderr
    for rank in (0, 1):
        assert f"rank {rank} stages every collective: invalid argument: mpi: reaching the rank's memory: region " \
               "descriptor: process memory of a peer not checked to be a process of this host and user" in run.stderr, \
            run.stderr


def test_without_an_agent_everything_passes_through_with_one_warning(built) -> None:
    which, exe = built
    run = _outboard("mpirun", "-np", "2", "--agents", "off", "--report", str(exe), str(ROUNDS))
    assert run.returncode == 0 and f"ok {ROUNDS} rounds" in run.stdout, run.stdout + run.stderr
    assert run.stderr.count("outboard-mpi: no agent serves this job (OUTBOARD_MPI_AGENT is unset)") == 1
    assert _report_lines(run.stderr) == _expected(2, offloaded=False)
    # An agent named but not there: the same, saying why.
    cmd = mpi.command([str(exe), "1"], 2, which, agent="127.0.0.1:9")
    run = _run_job(cmd)
    assert run.returncode == 0 and "ok 1 rounds" in run.stdout, run.stdout + run.stderr
    assert run.stderr.count("outboard-mpi: no agent: ") == 1 and "every operation passes through" in run.stderr


def _killed_mid_wait(which: mpi.Mpi, exe: Path, agents: list[LocalAgent], victim: LocalAgent,
                     p2p: str = "") -> tuple[str, str, float]:
    """Runs the program's "slow" mode (rank 0 waits in MPI_Wait while rank 1 sleeps 20 s) with
    ``agents`` (world rank r on agent r modulo their count) and kills ``victim`` a second into the
    wait: (stdout, stderr, seconds from the kill to the job's end)."""
    cmd = mpi.command([str(exe), "slow"], 2, which, agent=",".join(a.address for a in agents), p2p=p2p)
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert "rank 0: waiting" in job.stdout.readline() + job.stdout.readline()
        time.sleep(1.0)  # rank 0 is inside MPI_Wait
        victim.process.kill()
        killed = time.monotonic()
        out, err = job.communicate(timeout=15)
    finally:
        job.kill()
    return out, err, time.monotonic() - killed


def test_an_agent_killed_mid_collective_fails_the_wait_naming_it_instead_of_hanging(built) -> None:
    which, exe = built
    with LocalAgent() as agent:
        out, err, took = _killed_mid_wait(which, exe, [agent], agent)
    # Rank 0 hears within the connection's keepalive, well under the 20 s its peer sleeps.
    assert took < 15
    assert "rank 0: MPI_Wait failed" in out, out + err
    assert re.search(rf"outboard-mpi: MPI_Ialltoall #0 on communicator 0 failed: .*{re.escape(agent.address)}",
                     err), err


def test_another_ranks_agent_killed_mid_collective_fails_the_wait_naming_that_agent(built) -> None:
    """An agent per rank: rank 0's agent shared its blocks with rank 1's, which dies while rank 1 is
    still to post; rank 0's wait fails naming rank 1's agent, not its own, which lives on."""
    which, exe = built
    with LocalAgent(env=mpi.PEER_AGENT_ENV) as mine, LocalAgent(env=mpi.PEER_AGENT_ENV) as other:
        out, err, took = _killed_mid_wait(which, exe, [mine, other], other)
        assert mine.process.poll() is None
    assert took < 15
    assert "rank 0: MPI_Wait failed" in out, out + err
    assert re.search(rf"outboard-mpi: MPI_Ialltoall #0 on communicator 0 failed: .*agent {re.escape(other.address)}",
                     err), err


def test_counts_that_disagree_between_ranks_fail_every_rank_naming_them(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", str(exe), "mismatch")
    assert run.returncode != 0
    assert run.stdout.count("MPI_Wait failed") == 2, run.stdout + run.stderr
    assert "outboard-mpi: MPI_Ialltoallv #0 on communicator 0 failed: invalid argument: mpi: alltoallv #0 on " \
           "communicator 0: rank 0 sends 8 B to rank 1, which expects 12 B" in run.stderr


def _session_rss_kb(agent: LocalAgent) -> int:
    """Resident memory of the agent's session process (the one a job's ranks share)."""
    children = [int(c) for t in Path(f"/proc/{agent.process.pid}/task").glob("*/children") for c in t.read_text().split()]
    assert len(children) == 1, children
    return int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{children[0]}/status").read_text()).group(1))


def test_ten_thousand_collectives_back_to_back_leave_no_memory_behind(built) -> None:
    which, exe = built
    agent_kb = []
    with LocalAgent(*mpi.NODE_AGENT_ARGS) as agent:
        cmd = mpi.command([str(exe), "many"], 2, which, agent=agent.address, report=True)
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        try:
            out = []
            for line in job.stdout:  # rank 0 prints "at 1000" and "at 10000" as it passes them
                out.append(line)
                if line.startswith("at "):
                    agent_kb.append(_session_rss_kb(agent))
            err = job.stderr.read()
            assert job.wait(timeout=RUN_TIMEOUT_S) == 0, "".join(out) + err
        finally:
            job.kill()
    stdout = "".join(out)
    at_1000, at_10000 = map(int, re.search(r"rss after 1000: (\d+) kB, after 10000: (\d+) kB", stdout).groups())
    assert at_10000 - at_1000 < 1024, stdout  # kB: no per-operation state kept in the rank
    assert len(agent_kb) == 2 and agent_kb[1] - agent_kb[0] < 1024, agent_kb  # nor in the agent
    assert _report_lines(err)["MPI_Iallreduce"] == f"20000 offloaded {0:8} passed through"


def test_a_receive_buffer_freed_before_completion_kills_that_rank_not_the_agent(built) -> None:
    which, exe = built
    with LocalAgent(*mpi.NODE_AGENT_ARGS) as agent:
        bad = _run_job(mpi.command([str(exe), "freed"], 2, which, agent=agent.address))
        assert bad.returncode != 0 and "rank 0: waited" not in bad.stdout, bad.stdout + bad.stderr
        # The agent serves the next job as if nothing happened.
        good = _run_job(mpi.command([str(exe), "1"], 2, which, agent=agent.address, report=True))
        assert good.returncode == 0 and "ok 1 rounds" in good.stdout, good.stdout + good.stderr
        assert agent.process.poll() is None
        assert not _report_lines(good.stderr)["MPI_Ialltoall"].startswith("0 offloaded"), good.stderr


def test_mpi_abort_ends_the_job_while_a_rank_waits_on_the_agent(built) -> None:
    _, exe = built
    start = time.monotonic()
    run = _outboard("mpirun", "-np", "2", str(exe), "abort")
    assert run.returncode == 7 and time.monotonic() - start < 30, run.stdout + run.stderr


def test_the_interposer_built_with_asan_runs_the_program_clean(built) -> None:
    """make test builds build/asan (ASan+UBSan) before pytest runs: its interposer, preloaded after
    libasan, runs the whole program with offload. Leak checks are off: the MPI libraries leak."""
    which, exe = built
    lib = ASAN_BUILD / f"liboutboard_mpi_{which.name}.so"
    if not lib.exists():
        pytest.skip(f"{lib} not built (make test-asan builds it)")
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    with LocalAgent() as agent:
        cmd = mpi.command([str(exe), "2"], 2, which, report=True, agent=agent.address)
        cmd = [a.replace(str(mpi.interposer(which)), f"{libasan} {lib}") for a in cmd]
        sanitizer_env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1",
                         "UCX_MEM_MALLOC_HOOKS": "no", "UCX_MEM_MMAP_HOOK_MODE": "none"}
        cmd = [cmd[0], *which.env_args(sanitizer_env), *cmd[1:]]
        run = _run_job(cmd)
    assert run.returncode == 0 and "ok 2 rounds" in run.stdout, run.stdout + run.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in run.stderr and "runtime error" not in run.stderr
    assert _report_lines(run.stderr)["MPI_Ialltoallv"] == f"12 offloaded {0:8} passed through"


def test_collectives_larger_than_the_staging_memory_pass_through_and_the_rest_offload(built) -> None:
    which, exe = built
    with LocalAgent() as agent:
        cmd = mpi.command([str(exe), "2"], 2, which, report=True, agent=agent.address)
        cmd = [cmd[0], *which.env_args({"OUTBOARD_MPI_STAGING_BYTES": "16384"}), *cmd[1:]]
        run = _run_job(cmd)
    assert run.returncode == 0 and "ok 2 rounds" in run.stdout, run.stdout + run.stderr
    alltoall = _report_lines(run.stderr)["MPI_Ialltoall"]
    assert "larger than the staging memory" in alltoall and not alltoall.startswith("0 offloaded"), alltoall


def _run_with_agents(built: tuple[mpi.Mpi, Path], mode: str, agents: int, env: dict[str, str],
                     report: bool = False) -> subprocess.CompletedProcess:
    """The test program's ``mode`` on 2 ranks with ``env``, served by one agent or by one each."""
    which, exe = built
    with LocalAgent(env=mpi.PEER_AGENT_ENV) as a, LocalAgent(env=mpi.PEER_AGENT_ENV) as b:
        addresses = ",".join(x.address for x in (a, b)[:agents])
        cmd = mpi.command([str(exe), mode], 2, which, report=report, agent=addresses)
        return _run_job([cmd[0], *which.env_args(env), *cmd[1:]])


@pytest.mark.parametrize("agents, reach", [(1, True), (2, True), (1, False), (2, False)],
                         ids=["1 agent", "2 agents", "1 agent, no reach", "2 agents, no reach"])
def test_an_alltoallv_too_large_for_one_ranks_staging_is_offloaded_by_every_rank(built, agents, reach) -> None:
    """Only rank 0's buffers exceed the staging memory; had it passed the call through while the
    other rank offloaded it, both would wait for each other. With two agents (one per rank, as on
    two nodes) both ranks' buffers go in place where the agents reach them; with one, or where the
    agent cannot reach them, rank 0's go through staging of their own."""
    env = {"OUTBOARD_MPI_STAGING_BYTES": "65536", "OUTBOARD_MPI_TIMEOUT_S": "20"}
    if not reach:
        env["OUTBOARD_MPI_EXPOSE"] = "0"
    run = _run_with_agents(built, "uneven", agents, env, report=True)
    assert run.returncode == 0 and "ok uneven" in run.stdout, run.stdout + run.stderr
    assert _report_lines(run.stderr)["MPI_Ialltoallv"] == f"2 offloaded {0:8} passed through"
    assert _buffers(run.stderr) == ((0, 2) if not reach or agents == 1 else (2, 0))
    assert _own_staging(run.stderr) == ((1, 1) if not reach or agents == 1 else None)


@pytest.mark.parametrize("agents, env, staged, own", [
    (1, {}, 20, (20, 6)),
    (1, {"OUTBOARD_MPI_EXPOSE": "0"}, 20, (20, 6)),
    (1, {"OUTBOARD_MPI_EXPOSE": "0", "OUTBOARD_MPI_SPARE_STAGING_BYTES": "0"}, 20, (20, 20)),
    (1, {"OUTBOARD_MPI_SPARE_STAGING_BYTES": "0"}, 0, None),
    (2, {}, 0, None),
], ids=["1 agent", "no reach", "no reach, no spare", "no spare", "2 agents"])
def test_ialltoallvs_too_large_for_staging_reuse_staging_of_their_own_and_stay_right(built, agents, env, staged,
                                                                                    own) -> None:
    """Ten Ialltoallvs too large for staging, of sizes that stay, grow and shrink, the last two in
    flight at once, each checked against MPI's. With one agent each rank's go through staging of
    their own, kept for the next call that fits in it (a larger call frees it), and posted kept: the
    agent maps it once. Without a spare every call has a region of its own, freed with it, whose
    descriptor's bytes the next region's often repeat: the agent must drop its import of the freed
    one (a post names it) or it would read and write the old memory. Where staging of their own
    cannot be kept, or two agents serve the ranks, they go in place where the agent reaches them."""
    env = {"OUTBOARD_MPI_STAGING_BYTES": "65536", "OUTBOARD_MPI_TIMEOUT_S": "20", **env}
    run = _run_with_agents(built, "repeat", agents, env, report=True)
    assert run.returncode == 0 and "ok repeat" in run.stdout, run.stdout + run.stderr
    assert _report_lines(run.stderr)["MPI_Ialltoallv"] == f"20 offloaded {0:8} passed through"
    assert _buffers(run.stderr) == (20 - staged, staged)
    assert _own_staging(run.stderr) == own


@pytest.mark.parametrize("agents", [1, 2], ids=["1 agent", "2 agents"])
def test_an_alltoallv_whose_own_staging_is_refused_fails_every_rank_at_once_naming_why(built, agents) -> None:
    """Rank 0's buffers need staging of their own (the agent cannot reach them), over its limit: it
    posts the call all the same, saying why, and rank 1 hears that rather than wait for it."""
    env = {"OUTBOARD_MPI_STAGING_BYTES": "65536", "OUTBOARD_MPI_EXPOSE": "0", "OUTBOARD_MPI_TIMEOUT_S": "60",
           "OUTBOARD_MPI_OWN_STAGING_BYTES": "65536"}
    start = time.monotonic()
    run = _run_with_agents(built, "uneven", agents, env)
    took = time.monotonic() - start
    assert run.returncode != 0 and run.stdout.count("MPI_Wait failed") == 2, run.stdout + run.stderr
    assert run.stderr.count("rank 0 could not take part: staging of its own for 2097160 B exceeds "
                            "OUTBOARD_MPI_OWN_STAGING_BYTES 65536") == 2, run.stderr
    assert took < 30  # not the 60 s timeout


def test_without_report_no_report_is_printed(built) -> None:
    _, exe = built
    run = _outboard("mpirun", "-np", "2", str(exe), "1")
    assert run.returncode == 0 and "ok 1 rounds" in run.stdout, run.stderr
    assert "outboard-mpi" not in run.stderr


def test_the_program_picks_its_interposer_and_the_wrong_one_refuses_to_run(built) -> None:
    which, exe = built
    assert mpi.detect(str(exe)) == which
    dry = _outboard("mpirun", "-np", "2", "--dry-run", str(exe))
    assert dry.returncode == 0 and f"liboutboard_mpi_{which.name}.so" in dry.stdout
    other = next(m for m in mpi.MPIS.values() if m != which)
    try:
        wrong = mpi.interposer(other)
    except NotFound:
        pytest.skip(f"only {which.family} is built here")
    cmd = mpi.command([str(exe), "1"], 2, which)
    cmd = [a.replace(str(mpi.interposer(which)), str(wrong)) for a in cmd]
    run = _run_job(cmd)
    assert run.returncode != 0 and "ok" not in run.stdout
    assert (f"liboutboard_mpi_{other.name}.so is built for {other.family} but this program runs on "
            f"'{which.family}") in run.stderr


@pytest.mark.parametrize("flavour", sorted(FORTRAN_FLAVOURS))
def test_fortran_calls_are_routed_and_reported_like_c_ones(built, flavour, tmp_path) -> None:
    which, _ = built
    fc = shutil.which(MPIF90[which.name])
    if not fc:
        pytest.skip(f"{MPIF90[which.name]} not installed (gfortran: scripts/bootstrap.sh installs it)")
    exe = tmp_path / "fortran"
    subprocess.run([fc, "-O1", *FORTRAN_FLAVOURS[flavour], "-o", str(exe), str(FORTRAN)], check=True,
                   capture_output=True)
    run = _outboard("mpirun", "-np", "2", "--report", str(exe))
    assert run.returncode == 0 and "ok fortran" in run.stdout, run.stdout + run.stderr
    # Open MPI's Fortran libraries (mpif.h's, and f08's through it) and MPICH's f08 one call PMPI_
    # directly, so the interposer wraps their Fortran symbols; MPICH's others call the C functions.
    # Either way every call offloads, in-place ones and those on a communicator from MPI_Cart_sub
    # (named by the wrapper) included.
    calls = {"MPI_Ialltoall": 4, "MPI_Ialltoallv": 1, "MPI_Iallgather": 1, "MPI_Ibcast": 1, "MPI_Iallreduce": 5}
    assert _report_lines(run.stderr) == {op: f"{2 * n} offloaded {0:8} passed through" for op, n in calls.items()}


def test_bad_arguments_are_named() -> None:
    run = _outboard("mpirun", "-np", "0", "./app")
    assert run.returncode == 2 and "-np 0: needs at least 1 rank" in run.stderr
    run = _outboard("mpirun", "-np", "2")
    assert run.returncode == 2 and "no program to run" in run.stderr
