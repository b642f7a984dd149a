"""engine.closeness: stored measurements against llama.cpp, found for the file on screen."""

from __future__ import annotations

from walkthrough.engine import closeness


def measured(model: str, size: int, types: tuple[str, ...], top1: float) -> closeness.Measured:
    return closeness.Measured(model, size, types, 365, top1, 3.4e-3, 0.11, 1.65, 64, 64, 0.0, "0.3.36")


def test_the_file_itself_first_then_a_file_with_the_same_types(tmp_path):
    path = tmp_path / "closeness.json"
    closeness.record(measured("b.gguf", 20, ("F32", "Q8_0"), 0.9), path)
    closeness.record(measured("a.gguf", 10, ("F32", "Q4_1", "Q8_0"), 0.97), path)
    closeness.record(measured("a.gguf", 10, ("F32", "Q4_1", "Q8_0"), 0.98), path)  # replaces the older entry
    assert [e.model for e in closeness.load(path)] == ["a.gguf", "b.gguf"]
    assert closeness.find("a.gguf", 10, {"F32", "Q4_1", "Q8_0"}, path) == (closeness.load(path)[0], True)
    other, same = closeness.find("c.gguf", 99, {"Q8_0", "F32"}, path)
    assert (other.model, same) == ("b.gguf", False)
    assert closeness.find("d.gguf", 5, {"Q6_K"}, path) is None


def test_note_names_the_file_measured(tmp_path):
    path = tmp_path / "closeness.json"
    closeness.record(measured("a.gguf", 10, ("F32", "Q4_1"), 0.973), path)
    own = closeness.note("a.gguf", 10, {"F32", "Q4_1"}, path)
    assert "on this file" in own and "97.3%" in own and "64 of 64" in own and "independent of the chunk size" in own
    assert "on a.gguf, which stores the same weight types" in closeness.note("x.gguf", 1, {"F32", "Q4_1"}, path)
    assert closeness.note("x.gguf", 1, {"BF16"}, path) is None
