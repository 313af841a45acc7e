"""The runner table is complete (tools/shell/runners.py): every program of the base packages on
this machine either runs a command, and is then read by the table (or named opaque), or is
declared here as running none; and every runner of the table is run for real by the security
suite (tests/security/test_shell_readings.py, ``RUNNER_FORMS``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.security.test_shell_readings import RUNNER_FORMS
from tools.shell.options import SHELLS, TABLE, names
from tools.shell.runners import OPAQUE, OWN_SCAN

PACKAGES = (
    "coreutils",
    "util-linux",
    "util-linux-extra",
    "bsdutils",
    "procps",
    "findutils",
    "debianutils",
)
# Programs of those packages that run no command given in their arguments. A new program there
# fails the test below until it is put here or in the runner table.
NOT_RUNNERS = names(
    """
    [ arch b2sum base32 base64 basename basenc cat chcon chgrp chmod chown cksum comm cp csplit
    cut date dd df dir dircolors dirname du echo expand expr factor false fmt fold groups head
    hostid id install join link ln logname ls md5sum md5sum.textutils mkdir mkfifo mknod mktemp
    mv nl nproc numfmt od paste pathchk pinky pr printenv printf ptx pwd readlink realpath rm
    rmdir seq sha1sum sha224sum sha256sum sha384sum sha512sum shred shuf sleep sort split stat
    stty sum sync tac tail tee test touch tr true truncate tsort tty uname unexpand uniq unlink
    users vdir wc who whoami yes
    addpart blkdiscard blkid blkzone blockdev chcpu chmem ctrlaltdel delpart dmesg fallocate
    findfs findmnt fsck fsck.cramfs fsck.minix fsfreeze fstrim getopt hardlink ipcmk ipcrm ipcs
    isosize last lastb ldattach lsblk lscpu lsipc lslocks lslogins lsmem lsns mcookie mesg mkfs
    mkfs.bfs mkfs.cramfs mkfs.minix mkswap more mountpoint namei partx pivot_root readprofile
    rename.ul resizepart rev rtcwake setterm swaplabel utmpdump wdctl whereis wipefs zramctl
    fincore hwclock lsfd lsirq
    logger renice scriptreplay wall
    free kill pgrep pidwait pkill pmap ps pwdx skill slabtop snice sysctl tload top uptime
    vmstat w
    add-shell installkernel ischroot remove-shell savelog tempfile update-shells
    which.debianutils which
    """
)


def _programs(package: str) -> set[str]:
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True)
    if listed.returncode != 0:
        return set()
    return {
        Path(line).name
        for line in listed.stdout.splitlines()
        if "/bin/" in line and Path(line).is_file() or "/sbin/" in line and Path(line).is_file()
    }


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian's package list)")
@pytest.mark.parametrize("package", PACKAGES)
def test_every_program_of_the_base_packages_is_classified(package):
    programs = _programs(package)
    if not programs:
        pytest.skip(f"{package} is not installed here")
    known = set(TABLE) | OWN_SCAN | OPAQUE | {"xargs", "find"}
    unclassified = sorted(programs - known - NOT_RUNNERS)
    assert not unclassified, (
        f"{package} has programs no one classified: {unclassified}. A program that runs a "
        "command given in its arguments goes into tools/shell/runners.py (TABLE, read by its "
        "options, or OPAQUE); any other into NOT_RUNNERS here."
    )


def test_every_runner_of_the_table_is_run_by_the_security_suite():
    run = {word.rsplit("/", 1)[-1] for line in RUNNER_FORMS.values() for word in line.split()}
    missing = sorted(set(TABLE) - run - (SHELLS - {"sh", "bash", "dash"}))
    assert not missing, f"runners without a form in RUNNER_FORMS: {missing}"


def test_a_runner_is_never_also_declared_as_running_nothing():
    assert not (set(TABLE) | OWN_SCAN | OPAQUE) & NOT_RUNNERS
