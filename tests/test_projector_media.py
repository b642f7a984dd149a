"""Images and video through a projector (issue 31 item 6): video frames counted as mtmd counts them, the app's
and inspect's --mmproj, and projector files read as hostile input. Projector headers are written with
gguf.GGUFWriter (metadata only); expected counts are worked out here from mtmd's rules, step by step."""

from __future__ import annotations

import json
import math

import pytest
from app_support import SIZES, app_for, press_stage, settle, shown_text, stage_key
from gguf import GGUFWriter
from test_cli_errors import assert_one_line_error, run_cli

from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.inspect.projector import (
    Media,
    ProjectorError,
    media_tokens,
    open_projector,
    parse_media,
)


def write_projector(path, keys: dict) -> str:
    """A projector-shaped GGUF: `clip.*` keys only, each written with the type its Python value has."""
    w = GGUFWriter(str(path), "clip")
    for key, value in keys.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif value < 0:
            w.add_int32(key, value)
        else:
            w.add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


QWEN = {"clip.projector_type": "qwen2.5vl_merger", "clip.has_vision_encoder": True, "clip.vision.image_size": 560,
        "clip.vision.patch_size": 14, "clip.vision.spatial_merge_size": 2}
GEMMA = {"clip.projector_type": "gemma3", "clip.has_vision_encoder": True, "clip.vision.image_size": 896,
         "clip.vision.patch_size": 14}


def _qwen_frame(width: int, height: int) -> int:
    """One Qwen2.5-VL image's tokens by mtmd's rules: sides rounded to 28 px, (w/28) x (h/28) merged patches, + 2."""
    w, h = round(width / 28) * 28, round(height / 28) * 28
    return (w // 28) * (h // 28) + 2


@pytest.mark.parametrize("frames", [16, 15, 1])
def test_qwen_video_pairs_frames_in_time(tmp_path, frames):
    projector = open_projector(write_projector(tmp_path / "mmproj-qwen.gguf", QWEN))
    counted = media_tokens(projector, Media("video", frames, 640, 360))
    assert counted.chunks == math.ceil(frames / 2) and counted.merge == 2  # clip_model_n_temporal_merge = 2
    assert counted.tokens == math.ceil(frames / 2) * _qwen_frame(640, 360) == math.ceil(frames / 2) * (23 * 13 + 2)


def test_other_projectors_count_each_frame_as_an_image(tmp_path):
    projector = open_projector(write_projector(tmp_path / "mmproj-gemma.gguf", GEMMA))
    video = media_tokens(projector, parse_media("v5x640x360"))
    images = media_tokens(projector, parse_media("5x640x360"))
    per_image = (896 // 14) ** 2 // 4**2 + 2  # 64 x 64 patches, 4 x 4 merged, + begin/end
    assert video.tokens == images.tokens == 5 * per_image == 5 * 258 and video.merge == 1


def test_media_specs():
    assert parse_media("2x640x480") == Media("image", 2, 640, 480)
    assert parse_media("v16") == Media("video", 16, 1024, 768)
    assert parse_media(" V8x320x240 ") == Media("video", 8, 320, 240)
    assert parse_media("0").count == 0
    for bad in ("two", "v0", "x", "3x10", "1x0x5", "999999999", "1x70000x10", "v-2"):
        with pytest.raises(ProjectorError):
            parse_media(bad)


HOSTILE = {
    "a string for a size": dict(QWEN, **{"clip.vision.image_size": "560"}),
    "a zero patch": dict(QWEN, **{"clip.vision.patch_size": 0}),
    "a negative size": dict(QWEN, **{"clip.vision.image_size": -560}),
    "a bool for a size": dict(QWEN, **{"clip.vision.patch_size": True}),
    "a patch larger than the image": dict(QWEN, **{"clip.vision.patch_size": 900}),
    "a huge merge": dict(QWEN, **{"clip.vision.spatial_merge_size": 1000}),
    "a huge side": dict(GEMMA, **{"clip.vision.image_size": 1 << 30}),
    "a long type": dict(QWEN, **{"clip.projector_type": "q" * 10_000}),
    "a float merge": dict(GEMMA, **{"clip.vision.projector.scale_factor": 4.0}),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_projectors_are_one_line_everywhere(tmp_path, capsys, case):
    path = write_projector(tmp_path / "mmproj-bad.gguf", HOSTILE[case])
    with pytest.raises(ProjectorError):
        open_projector(path)
    code, out, err = run_cli(capsys, ["inspect", path])  # the file itself: its card prints, the section says why
    assert code == 0 and "Image tokens" in out, err
    code, out, err = run_cli(capsys, ["inspect", path, "--json"])
    assert code == 0 and "error" in json.loads(out)["projector"]
    for argv in (["inspect", BUNDLED_MODEL, "--mmproj", path], ["estimate", "--images", "1", "--mmproj", path],
                 [BUNDLED_MODEL, "--mmproj", path]):
        code, out, err = run_cli(capsys, argv)
        assert_one_line_error(code, out, err)
        assert len(err) < 300, err  # a 10,000-character type is not echoed whole


def test_a_type_with_control_characters_is_shown_literally(tmp_path, capsys):
    path = write_projector(tmp_path / "mmproj-esc.gguf", dict(QWEN, **{"clip.projector_type": "x\x1b[31mred\x07"}))
    code, out, err = run_cli(capsys, ["inspect", path])
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "red" in out
    code, out, err = run_cli(capsys, ["inspect", BUNDLED_MODEL, "--mmproj", path])
    assert_one_line_error(code, out, err, "not modelled")
    assert "\x1b" not in err


def test_inspect_mmproj_counts_the_images(tmp_path, capsys):
    path = write_projector(tmp_path / "mmproj-qwen.gguf", QWEN)
    code, out, err = run_cli(capsys, ["inspect", BUNDLED_MODEL, "--mmproj", path, "--images", "v16x640x360"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"8 chunks (16 frames, 2 merged in time) x {_qwen_frame(640, 360)} tokens = {8 * _qwen_frame(640, 360):,}" \
        in flat
    code, out, err = run_cli(capsys, ["inspect", BUNDLED_MODEL, "--mmproj", path, "--images", "2x640x480", "--json"])
    media = json.loads(out)["mmproj"]["media"]
    assert (media["kind"], media["count"], media["tokens"]) == ("image", 2, 2 * _qwen_frame(640, 480))
    code, out, err = run_cli(capsys, ["inspect", "--images", "2"])
    assert_one_line_error(code, out, err, "--mmproj")


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_file_stage_counts_typed_media_and_costs_adds_them(tmp_path, size):
    path = write_projector(tmp_path / "mmproj-qwen.gguf", QWEN)
    app = app_for(BUNDLED_MODEL, mmproj=path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await press_stage(pilot, "file")
        await pilot.pause()
        prompt = len(app.state.prompt_ids)
        one = _qwen_frame(1024, 768)  # the default: one image of 1024x768
        text = " ".join(shown_text(app).split())
        assert "1 image of 1024x768" in text and f"the prompt becomes {prompt + one:,} tokens" in text
        await pilot.press("i")
        await pilot.pause()
        await pilot.press(*"v16x640x360", "enter")
        await pilot.pause()
        video = 8 * _qwen_frame(640, 360)
        text = " ".join(shown_text(app).split())
        assert "a 16-frame video of 640x360" in text and f"{video:,} tokens" in text
        assert f"the prompt becomes {prompt + video:,} tokens" in text
        await pilot.press("i", *"nonsense", "enter")  # a bad spec: a notice, the count stays
        await pilot.pause()
        assert app.state.media == Media("video", 16, 640, 360)
        await pilot.press("escape", stage_key("costs"))
        await pilot.pause()
        assert app.screen.request_size().prompt_tokens == prompt + video
        assert f"the prompt holds {video:,} tokens of a 16-frame video" in " ".join(shown_text(app).split())


def test_the_app_never_writes_over_the_projector(tmp_path):
    from walkthrough.safewrite import run_inputs

    path = write_projector(tmp_path / "mmproj-qwen.gguf", QWEN)
    assert ("the --mmproj file", tmp_path / "mmproj-qwen.gguf") in run_inputs(None, None, None, None, path)
