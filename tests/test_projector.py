"""Image tokens from multimodal projector headers (`mmproj-*.gguf`), written with gguf.GGUFWriter.

Headers carry the `clip.*` keys llama.cpp's tools/mtmd reads; the expected
counts are worked out here from mtmd's rules, step by step, independently of
`walkthrough.inspect.projector`.
"""

from __future__ import annotations

import json
import math

import pytest
from gguf import GGUFWriter
from test_cli_errors import assert_one_line_error, run_cli

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.projector import ProjectorError, image_tokens, parse_images, read_projector


def write_mmproj(path, projector_type: str, image_size: int, patch_size: int, **extra) -> str:
    w = GGUFWriter(str(path), "clip")
    w.add_string("clip.projector_type", projector_type)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    for key, value in extra.items():
        w.add_uint32(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.fixture
def gemma3(tmp_path):
    return write_mmproj(tmp_path / "mmproj-gemma3.gguf", "gemma3", 896, 14)


@pytest.fixture
def qwen25vl(tmp_path):
    return write_mmproj(tmp_path / "mmproj-qwen25vl.gguf", "qwen2.5vl_merger", 560, 14,
                        **{"clip.vision.spatial_merge_size": 2})


def test_gemma3_images_are_256_tokens_whatever_their_size(gemma3):
    projector = read_projector(open_gguf(gemma3))
    per_side = 896 // 14 // 4  # 64 patches a side, merged 4 x 4
    for size in ((1024, 768), (300, 2000), (896, 896)):
        shot = image_tokens(projector, *size)
        assert shot.patches == per_side * per_side == 256
        assert shot.tokens == 256 + 2 and shot.resized == (896, 896)


def test_qwen_vl_keeps_the_aspect_ratio_in_28_pixel_steps(qwen25vl):
    projector = read_projector(open_gguf(qwen25vl))
    align = 14 * 2
    w, h = round(1024 / align) * align, round(768 / align) * align  # 1036 x 756, inside 8..4096 merged patches
    shot = image_tokens(projector, 1024, 768)
    assert shot.resized == (w, h)
    assert shot.patches == (w // 28) * (h // 28) and shot.markers == 2


def test_qwen_vl_shrinks_a_huge_image_under_4096_tokens(qwen25vl):
    projector = read_projector(open_gguf(qwen25vl))
    shot = image_tokens(projector, 8000, 6000)
    beta = math.sqrt(8000 * 6000 / (4096 * 28 * 28))
    assert shot.resized == (math.floor(8000 / beta / 28) * 28, math.floor(6000 / beta / 28) * 28)
    assert shot.patches <= 4096


def test_a_model_file_has_no_projector(fixtures_dir):
    assert read_projector(open_gguf(fixtures_dir / "reference" / "ref-llama-f32.gguf")) is None


def test_unmodelled_types_and_bad_sizes_say_so(tmp_path):
    projector = read_projector(open_gguf(write_mmproj(tmp_path / "m.gguf", "idefics3", 364, 14)))
    with pytest.raises(ProjectorError, match="idefics3"):
        image_tokens(projector, 100, 100)
    with pytest.raises(ProjectorError, match="write N or NxWxH"):
        parse_images("two")
    assert parse_images("3x1920x1080") == (3, 1920, 1080) and parse_images("2") == (2, 1024, 768)


def test_inspect_shows_the_image_tokens(gemma3, capsys):
    code, out, err = run_cli(capsys, ["inspect", gemma3])
    assert code == 0, err
    assert "a 1024x768 image: 258 tokens" in " ".join(out.split())
    code, out, err = run_cli(capsys, ["inspect", gemma3, "--json"])
    assert json.loads(out)["projector"]["image"]["tokens"] == 258


def test_estimate_adds_the_images_to_the_prompt(gemma3, capsys):
    code, out, err = run_cli(capsys, ["estimate", "--hardware", "cpu-here", "--prompt-tokens", "100",
                                      "--output-tokens", "10", "--json"])
    base = json.loads(out)[0]
    code, out, err = run_cli(capsys, ["estimate", "--hardware", "cpu-here", "--prompt-tokens", "100",
                                      "--output-tokens", "10", "--images", "2x640x480", "--mmproj", gemma3,
                                      "--json"])
    assert code == 0, err
    [with_images] = json.loads(out)
    assert with_images["images"]["tokens"] == 2 * 258
    assert with_images["prompt_tokens"] == base["prompt_tokens"] + 516


def test_images_without_a_projector_is_one_line(capsys, fixtures_dir):
    code, out, err = run_cli(capsys, ["estimate", "--images", "2"])
    assert_one_line_error(code, out, err, "--mmproj")
    code, out, err = run_cli(capsys, ["estimate", "--images", "2", "--mmproj",
                                      fixtures_dir / "reference" / "ref-llama-f32.gguf"])
    assert_one_line_error(code, out, err, "not a multimodal projector")
