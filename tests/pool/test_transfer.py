"""File transfer on a real pool on one machine (`fetchwork up`): jobs whose inputs
travel through the pool's Redis into their sandbox and whose outputs come back
into their Iwd, written as the submitting user; folders (`dir` and `dir/`),
preserve_relative_paths, remaps, the holds of HTCondor's codes 12, 13, 32 and 33,
a symbolic link among the outputs, a name with `..`, -spool with transfer-data.

Under a root test run the jobs are submitted with Owner `daemon` into folders
only `daemon` may enter, and run as `nobody` (STARTER_ALLOW_RUNAS_OWNER false),
who cannot read them: everything the job has arrived through the pool. The pool
is stood up once; each test asserts on what its jobs left.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import htcondor2
import pytest
import redis

from tests.support.folders import open_folder
from tests.support.pools import UpPool, fw, pool_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

ROOT = os.geteuid() == 0
SUBMITTER = "daemon" if ROOT else pwd.getpwuid(os.geteuid()).pw_name

PROGRAM = """#!/bin/sh
# Reads what arrived, makes outputs; $1 picks extra behaviour.
[ -f in1.txt ] && cat in1.txt > got_in1.txt
[ -d data ] && ls data > got_data.txt
[ -f inner.txt ] && cat inner.txt > got_inner.txt
[ -f sub/deep.txt ] && cat sub/deep.txt > got_deep.txt
[ -f data.txt ] && cat data.txt > got_url.txt
echo out > result.txt
mkdir -p outdir && echo x > outdir/o.txt
case "$1" in
  big) head -c 2100000 /dev/zero > big.bin ;;
  link) ln -s "$2" leak ;;
esac
id -un
echo hello
"""


# A job's own plugin (HTCondor's file-transfer plugin protocol): fake:// URLs are
# downloaded as a line naming them and uploaded by copying to the URL's path;
# broken:// URLs fail with exit code 7.
PLUGIN = r"""#!/usr/bin/python3
import re, shutil, sys
if "-classad" in sys.argv:
    print('MultipleFileSupport = true\nPluginVersion = "0.1"\nPluginType = "FileTransfer"\n'
          'SupportedMethods = "fake,broken"')
    sys.exit(0)
ads = open(sys.argv[sys.argv.index("-infile") + 1]).read()
results, code = [], 0
pairs = [(re.search(r'Url = "([^"]*)"', block).group(1),
          re.search(r'LocalFileName = "([^"]*)"', block).group(1))
         for block in ads.split("]") if "Url" in block]
for url, local in pairs:
    if url.startswith("broken:"):
        results.append('[ TransferSuccess = false; TransferError = "broken on purpose"; '
                       f'TransferUrl = "{url}"; TransferFileName = "{local}" ]')
        code = 7
        continue
    if "-upload" in sys.argv:
        shutil.copyfile(local, url.split("://", 1)[1])
    else:
        open(local, "w").write(f"from {url}\n")
    results.append(f'[ TransferSuccess = true; TransferUrl = "{url}"; '
                   f'TransferFileName = "{local}"; TransferTotalBytes = 10 ]')
open(sys.argv[sys.argv.index("-outfile") + 1], "w").write("\n".join(results) + "\n")
sys.exit(code)
"""
HAVE_PYTHON = os.access("/usr/bin/python3", os.X_OK)


@dataclass
class Setup:
    pool: UpPool
    env: dict[str, str]
    work: Path
    secret: Path


def _chown(path: Path) -> None:
    if not ROOT:
        return
    entry = pwd.getpwnam(SUBMITTER)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="module")
def setup() -> Iterator[Setup]:
    with open_folder("fw-xfer-") as root:
        with pool_up(root, 2, STARTER_ALLOW_RUNAS_OWNER="false",
                     TRANSFER_POOL_MAX_MB="8") as pool:
            env = {**pool.env, "USER": SUBMITTER, "LOGNAME": SUBMITTER}
            work = root / "work"
            work.mkdir()
            (work / "prog.sh").write_text(PROGRAM)
            (work / "prog.sh").chmod(0o755)
            (work / "in1.txt").write_text("one\n")
            (work / "data").mkdir()
            (work / "data" / "a.txt").write_text("a\n")
            (work / "data" / "b.txt").write_text("b\n")
            (work / "flat").mkdir()
            (work / "flat" / "inner.txt").write_text("inner\n")
            (work / "sub").mkdir()
            (work / "sub" / "deep.txt").write_text("deep\n")
            (work / "big.in").write_bytes(b"\0" * 2_100_000)
            for name in ("b", "spool", "escape", "urls"):
                (work / name).mkdir()
            (work / "plug.py").write_text(PLUGIN)
            (work / "plug.py").chmod(0o755)
            _chown(work)
            work.chmod(0o700)
            uploads = root / "uploads"
            uploads.mkdir()
            uploads.chmod(0o777)
            secret = root / "secret.txt"
            secret.write_text("only root\n")
            secret.chmod(0o600)
            yield Setup(pool, env, work, secret)


def submit(setup: Setup, name: str, text: str, *options: str) -> str:
    path = setup.work / f"{name}.sub"
    path.write_text("executable = prog.sh\nshould_transfer_files = YES\n"
                    f"output = {name}.out\n" + text + "\nqueue\n")
    done = fw(setup.env, "submit", *options, path.name, cwd=setup.work)
    assert "sent the inputs" in done.stderr
    return done.stdout.split("cluster ")[1].split(".")[0] + ".0"


def ad_of(setup: Setup, job: str) -> dict[str, Any]:
    for view in ("q", "history"):
        found = json.loads(fw(setup.env, view, "--json", job.split(".")[0]).stdout)
        if found:
            return dict(found[0])
    return {}


def ended(setup: Setup, job: str) -> dict[str, Any]:
    """The job's ad once it completed or was held."""
    return wait_until(lambda: (lambda ad: ad if ad.get("JobStatus") in (4, 5) else None)(
        ad_of(setup, job)), timeout_s=120, fail_if=setup.pool.up.died,
        what=f"job {job} completed or held")


def test_files_and_folders_arrive_and_new_files_come_back(setup: Setup) -> None:
    job = submit(setup, "basic", "transfer_input_files = in1.txt, data, flat/\n"
                 "error = basic.err")
    assert ended(setup, job)["JobStatus"] == 4
    work = setup.work
    wait_until(lambda: (work / "basic.out").exists(), timeout_s=60, what="the output delivered")
    assert (work / "got_in1.txt").read_text() == "one\n"
    assert (work / "got_data.txt").read_text() == "a.txt\nb.txt\n"  # `data`: the folder
    assert (work / "got_inner.txt").read_text() == "inner\n"         # `flat/`: its contents
    lines = (work / "basic.out").read_text().splitlines()
    assert lines[-1] == "hello"
    if ROOT:
        assert lines[0] == "nobody"
        assert (work / "result.txt").stat().st_uid == pwd.getpwnam(SUBMITTER).pw_uid
    assert not (work / "outdir").exists()  # only files at the sandbox's top
    assert not (work / "prog.sh.1").exists()
    ad = ad_of(setup, job)
    assert ad["FetchworkOutputs"] == "delivered"
    assert ad["BytesSent"] > 0 and ad["TransferInputSizeMB"] == 1


def test_an_input_named_with_dotdot_is_refused_at_submit(setup: Setup) -> None:
    path = setup.work / "dots-in.sub"
    path.write_text("executable = prog.sh\nshould_transfer_files = YES\n"
                    "preserve_relative_paths = true\n"
                    "transfer_input_files = b/../sub/deep.txt, ../work/in1.txt\nqueue\n")
    done = fw(setup.env, "submit", path.name, cwd=setup.work, check=False)
    assert done.returncode == 1 and "'..'" in done.stderr
    assert "submitted" not in done.stdout


def test_preserve_relative_paths_keeps_folders(setup: Setup) -> None:
    shutil.copytree(setup.work / "sub", setup.work / "b" / "sub")
    _chown(setup.work / "b")
    job = submit(setup, "keep2", "initialdir = b\npreserve_relative_paths = true\n"
                 "transfer_input_files = sub/deep.txt\n"
                 "transfer_output_files = outdir, result.txt, got_deep.txt\n"
                 "transfer_output_remaps = \"result.txt = renamed.txt\"")
    assert ended(setup, job)["JobStatus"] == 4
    folder = setup.work / "b"
    wait_until(lambda: (folder / "renamed.txt").exists(), timeout_s=60, what="remapped output")
    assert (folder / "got_deep.txt").read_text() == "deep\n"
    assert (folder / "outdir" / "o.txt").read_text() == "x\n"
    assert not (folder / "result.txt").exists()


def test_a_missing_output_holds_with_code_12_naming_it(setup: Setup) -> None:
    job = submit(setup, "missing", "transfer_output_files = result.txt, nothere.txt")
    ad = ended(setup, job)
    assert ad["JobStatus"] == 5 and ad["HoldReasonCode"] == 12
    assert "nothere.txt" in ad["HoldReason"]


def test_an_input_over_its_limit_holds_with_code_32(setup: Setup) -> None:
    job = submit(setup, "bigin", "transfer_input_files = big.in\nmax_transfer_input_mb = 1")
    ad = ended(setup, job)
    assert ad["HoldReasonCode"] == 32 and "MaxTransferInputMB" in ad["HoldReason"]


def test_outputs_over_their_limit_hold_with_code_33(setup: Setup) -> None:
    job = submit(setup, "bigout", "arguments = big\nmax_transfer_output_mb = 1")
    ad = ended(setup, job)
    assert ad["HoldReasonCode"] == 33 and "MaxTransferOutputMB" in ad["HoldReason"]


@pytest.mark.skipif(not HAVE_PYTHON, reason="the test plugin needs /usr/bin/python3")
def test_a_url_input_and_a_url_output_go_through_the_jobs_plugin(setup: Setup) -> None:
    target = setup.work.parent / "uploads" / "uploaded.txt"
    job = submit(setup, "urls", "initialdir = urls\n"
                 "transfer_plugins = fake,broken=../plug.py\n"
                 "transfer_input_files = fake://example.org/in/data.txt\n"
                 "transfer_output_files = result.txt, urls.out\n"
                 f"transfer_output_remaps = \"result.txt = fake://{target}\"")
    ad = ended(setup, job)
    assert ad["JobStatus"] == 4, ad.get("HoldReason")
    folder = setup.work / "urls"
    wait_until(lambda: (folder / "urls.out").exists(), timeout_s=60, what="the job's output")
    assert target.read_text() == "out\n"
    assert not (folder / "result.txt").exists()
    assert ad["TransferInputStats"]


@pytest.mark.skipif(not HAVE_PYTHON, reason="the test plugin needs /usr/bin/python3")
def test_a_failing_plugin_holds_with_code_13_and_its_exit_code(setup: Setup) -> None:
    job = submit(setup, "broken", "transfer_plugins = fake,broken=plug.py\n"
                 "transfer_input_files = broken://example.org/x/y.dat")
    ad = ended(setup, job)
    assert ad["HoldReasonCode"] == 13 and ad["HoldReasonSubCode"] == 7
    assert "y.dat" in ad["HoldReason"] and "broken on purpose" in ad["HoldReason"]


def test_a_url_no_plugin_serves_holds_with_code_13(setup: Setup) -> None:
    job = submit(setup, "url", "transfer_input_files = nosuch://example.org/f.dat")
    ad = ended(setup, job)
    assert ad["HoldReasonCode"] == 13 and "f.dat" in ad["HoldReason"]


@pytest.mark.skipif(not ROOT, reason="a file only root may read needs a root test run")
def test_a_symlink_among_outputs_brings_nothing_back(setup: Setup) -> None:
    job = submit(setup, "link", f"arguments = link {setup.secret}\ninitialdir = escape")
    assert ended(setup, job)["JobStatus"] == 4
    folder = setup.work / "escape"
    wait_until(lambda: (folder / "result.txt").exists(), timeout_s=60, what="the outputs")
    assert not os.path.lexists(folder / "leak")
    for path in setup.work.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert "only root" not in path.read_text(errors="replace"), path
    listed = submit(setup, "link2", f"arguments = link {setup.secret}\ninitialdir = escape\n"
                    "transfer_output_files = leak")
    ad = ended(setup, listed)
    assert ad["HoldReasonCode"] == 12 and "symbolic link" in ad["HoldReason"]


def test_a_remap_with_dotdot_holds_and_writes_nothing_outside(setup: Setup) -> None:
    job = submit(setup, "dots", "initialdir = escape\n"
                 "transfer_output_remaps = \"result.txt = ../escaped.txt\"")
    ad = ended(setup, job)
    assert ad["HoldReasonCode"] == 12 and "'..'" in ad["HoldReason"]
    assert not (setup.work / "escaped.txt").exists()


def test_spooled_outputs_wait_for_transfer_data(setup: Setup) -> None:
    job = submit(setup, "spooled", "initialdir = spool", "-spool")
    assert ended(setup, job)["JobStatus"] == 4
    folder = setup.work / "spool"
    assert "hold outputs not yet fetched" in fw(setup.env, "q").stdout
    assert job in fw(setup.env, "history").stdout
    assert not (folder / "spooled.out").exists()
    done = fw(setup.env, "transfer-data", job)
    assert "output file(s) written" in done.stdout
    assert (folder / "spooled.out").read_text().endswith("hello\n")
    again = fw(setup.env, "transfer-data", job.split(".")[0])
    assert again.returncode == 0 and "already delivered" in again.stdout


def test_submit_wait_and_wait_fetch_spooled_outputs_as_jobs_end(setup: Setup) -> None:
    folder = setup.work / "spool"
    path = setup.work / "spool" / "waited.sub"
    path.write_text("executable = ../prog.sh\nshould_transfer_files = YES\n"
                    "output = waited.out\nlog = waited.log\nqueue\n")
    done = fw(setup.env, "-v", "submit", "-spool", "-wait", path.name, cwd=folder)
    assert "output file(s) written" in done.stdout + done.stderr
    assert (folder / "waited.out").read_text().endswith("hello\n")
    # The user log shows the files moving: HTCondor's event 040, in order.
    kinds = [event["Type"] for event in htcondor2.JobEventLog(str(folder / "waited.log"))
             .events(0) if event.type == htcondor2.JobEventType.FILE_TRANSFER]
    assert kinds == [1, 2, 3, 4, 5, 6]
    (folder / "waited.out").unlink()
    path.write_text(path.read_text().replace("waited", "waited2"))
    job = fw(setup.env, "submit", "-spool", path.name, cwd=folder).stdout
    cluster = job.split("cluster ")[1].split(".")[0]
    waited = fw(setup.env, "wait", "-wait", "120", "waited2.log", cluster, cwd=folder)
    assert "output file(s) written" in waited.stdout + waited.stderr
    assert (folder / "waited2.out").read_text().endswith("hello\n")


def _redis(setup: Setup) -> redis.Redis:
    return redis.Redis(unix_socket_path=str(setup.work.parent / "state" / "redis" /
                                            "redis.sock"))


def test_inputs_are_counted_by_the_queued_jobs_that_need_them(setup: Setup) -> None:
    path = setup.work / "counted.sub"
    (setup.work / "counted.in").write_text("only these jobs send this\n")
    _chown(setup.work / "counted.in")
    path.write_text("executable = prog.sh\nshould_transfer_files = YES\nhold = true\n"
                    "transfer_input_files = counted.in\nqueue 3\n")
    out = fw(setup.env, "submit", path.name, cwd=setup.work).stdout
    cluster = out.split("cluster ")[1].split(".")[0]
    manifest = json.loads(fw(setup.env, "q", "--json", cluster).stdout)[0][
        "FetchworkInputManifest"]
    client = _redis(setup)
    keys = [key.decode() for key in client.keys("fw:{default}:xfer:manifest:*")]
    refs = next(key for key in keys if key.endswith(manifest)).replace(
        f"manifest:{manifest}", "refs")
    assert int(client.hget(refs, manifest)) == 3
    fw(setup.env, "rm", f"{cluster}.0")
    assert int(client.hget(refs, manifest)) == 2
    held_bytes = int(client.get(refs.replace("refs", "bytes")))
    fw(setup.env, "rm", cluster)
    assert client.hget(refs, manifest) is None
    assert not client.exists(refs.replace("refs", f"manifest:{manifest}"))
    assert int(client.get(refs.replace("refs", "bytes"))) <= held_bytes - len(
        "only these jobs send this\n")
    digest = hashlib.sha256(b"only these jobs send this\n").hexdigest()
    assert not client.exists(refs.replace("refs", f"chunk:{digest}"))


def test_the_pools_own_cap_refuses_a_submission_naming_its_knob(setup: Setup) -> None:
    path = setup.work / "capped.sub"
    (setup.work / "capped.in").write_bytes(os.urandom(9_000_000))  # new to the pool
    _chown(setup.work / "capped.in")
    path.write_text("executable = prog.sh\nshould_transfer_files = YES\n"
                    "transfer_input_files = capped.in\nqueue\n")
    before = fw(setup.env, "q", "-totals").stdout
    # The pool's cap (8 MB, its broker service's), not the one the client's own
    # configuration would set.
    done = fw({**setup.env, "_FETCHWORK_TRANSFER_POOL_MAX_MB": "100000"}, "submit", path.name,
              cwd=setup.work, check=False)
    assert done.returncode == 1
    assert "TRANSFER_POOL_MAX_MB" in done.stderr and "nothing was queued" in done.stderr
    assert fw(setup.env, "q", "-totals").stdout == before


CHECKPOINTED = """#!/bin/sh
# Counts its runs in a file of its sandbox; the first run waits to be requeued.
n=$(cat state/count 2>/dev/null || echo 0)
n=$((n + 1))
mkdir -p state && echo $n > state/count
if [ $n -eq 1 ]; then echo started > started.txt; exec sleep 600; fi
echo "run $n"
"""


def test_on_exit_or_evict_restores_the_checkpoint_after_requeue(setup: Setup) -> None:
    folder = setup.work / "ckpt"
    folder.mkdir()
    (folder / "ckpt.sh").write_text(CHECKPOINTED)
    (folder / "ckpt.sh").chmod(0o755)
    _chown(folder)
    path = folder / "ckpt.sub"
    path.write_text("executable = ckpt.sh\nshould_transfer_files = YES\n"
                    "when_to_transfer_output = ON_EXIT_OR_EVICT\noutput = ckpt.out\nqueue\n")
    out = fw(setup.env, "submit", path.name, cwd=folder).stdout
    job = out.split("cluster ")[1].split(".")[0] + ".0"
    wait_until(lambda: ad_of(setup, job).get("JobStatus") == 2, timeout_s=60,
               what="the job running")
    execute = setup.work.parent / "state" / "execute"
    wait_until(lambda: list(execute.rglob("started.txt")), timeout_s=60,
               what="the first run counted in its sandbox")
    fw(setup.env, "requeue", job)
    ad = ended(setup, job)
    assert ad["JobStatus"] == 4, ad.get("HoldReason")
    wait_until(lambda: (folder / "ckpt.out").exists(), timeout_s=60, what="the output")
    assert (folder / "ckpt.out").read_text() == "run 2\n"
    assert ad.get("FetchworkCheckpointManifest")
