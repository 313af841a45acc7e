"""Images a host returns become ``image`` assets of the response: files of the attempt folder,
served with their SHA-256 checked, listed in the model's artifact index, never inline."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from conversations.models import Asset, ToolActivity
from conversations.storage import absolute_from_data, attempt_dir

from .api_helpers import API
from .host_helpers import JPEG, claim_one, png, ready_host_calls, settle

pytestmark = pytest.mark.django_db


def _image(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "mediaType": media_type, "data": base64.b64encode(data).decode()}


def _bytes_of(api, asset_id: str):
    response = api.get(f"{API}/assets/{asset_id}")
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content), response


def test_images_are_assets_served_with_their_digest_and_listed_for_the_model(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    picture, photo = png(width=16, height=16), JPEG
    # More text than the inline budget (200 lines), so the model's view is the head with the
    # artifact index.
    text = "".join(f"row {i}\n" for i in range(300))
    answer = settle(
        api,
        call_id,
        held,
        [{"type": "text", "text": text}, _image(picture), _image(photo, "image/jpeg")],
    )
    assert answer.status_code == 200, answer.content
    payload = answer.json()["response"]["payload"]
    assert picture not in answer.content and base64.b64encode(picture) not in answer.content

    assets = {str(a.pk): a for a in Asset.objects.filter(tool_call_id=call_id)}
    # The complete result first, then the images in the order of their blocks.
    ordered = [assets[i] for i in payload["assetIds"]]
    assert [(a.kind, a.path.rsplit("/", 1)[1]) for a in ordered] == [
        ("payload", "result.json"),
        ("image", "1.png"),
        ("image", "2.jpg"),
    ]
    images = ordered[1:]
    folder = attempt_dir(conversation.pk, call_id, held["generation"])
    assert [absolute_from_data(a.path) for a in images] == [
        (folder / "images" / "1.png").resolve(),
        (folder / "images" / "2.jpg").resolve(),
    ]
    for asset, data, media_type in (
        (images[0], picture, "image/png"),
        (images[1], photo, "image/jpeg"),
    ):
        assert (asset.size, asset.sha256, asset.media_type) == (
            len(data),
            hashlib.sha256(data).hexdigest(),
            media_type,
        )
        served, response = _bytes_of(api, str(asset.pk))  # its digest checked first
        assert served == data
        assert response["X-Content-SHA256"] == hashlib.sha256(data).hexdigest()
        assert response["Content-Type"] == media_type

    # The complete result names the files; the bytes are not in it.
    result = json.loads(_bytes_of(api, str(ordered[0].pk))[0])
    assert result == {
        "content": [
            {"type": "text", "text": text},
            {"type": "image", "mediaType": "image/png", "file": "images/1.png"},
            {"type": "image", "mediaType": "image/jpeg", "file": "images/2.jpg"},
        ]
    }

    (model,) = payload["modelContent"]
    index = model["text"].split("Artifacts:\n", 1)[1].splitlines()
    assert index == [
        f"- images/1.png (image, {len(picture)} bytes): {folder / 'images' / '1.png'}",
        f"- images/2.jpg (image, {len(photo)} bytes): {folder / 'images' / '2.jpg'}",
        "Inspect them with read or grep; do not rerun the tool.",
    ]
    # The card's output is the text only.
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert "omittedBytes" not in activity.payload_json["output"]
    assert activity.payload_json["output"]["text"] == text


def test_a_short_result_is_shown_unchanged_and_its_images_stay_assets(user, api):
    """An inline result is returned unchanged, without a path (the projections' rule): the
    images are reached through the response's assetIds."""
    _, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    answer = settle(api, call_id, held, [{"type": "text", "text": "A chart."}, _image(png())])
    payload = answer.json()["response"]["payload"]
    assert payload["modelContent"] == [{"type": "text", "text": "A chart."}]
    kinds = sorted(Asset.objects.filter(pk__in=payload["assetIds"]).values_list("kind", flat=True))
    assert kinds == ["image", "payload"]


def test_outcomes_other_than_completed(user, api):
    _, _, call_ids = ready_host_calls(user, count=3)
    failed, cancelled, indeterminate = call_ids
    claims = {
        c["toolCallId"]: c
        for c in api.post_json(
            f"{API}/host/claims", {"tools": ["notes_lookup"], "worker": "h", "max": 3}
        ).json()["claims"]
    }

    quiet = settle(api, failed, claims[failed], [], outcome="failed").json()
    text = quiet["response"]["payload"]["modelContent"][0]["text"]
    assert quiet["outcome"] == "failed"
    assert text.startswith("Tool call failed.\nTool: notes_lookup\n")
    assert "Reason: The host reported a failure without a message." in text

    stopped = settle(
        api,
        cancelled,
        claims[cancelled],
        [{"type": "text", "text": "stopped early"}],
        outcome="cancelled",
    )
    assert stopped.json()["outcome"] == "cancelled"
    assert stopped.json()["response"]["payload"]["modelContent"][0]["text"].startswith(
        "Tool call cancelled."
    )
    unknown = settle(api, indeterminate, claims[indeterminate], [], outcome="indeterminate")
    assert unknown.json()["outcome"] == "indeterminate"
