"""Untrusted text reaches the terminal with escapes visible and markup uninterpreted."""

from rich.console import Console

from walkthrough.textsafe import json_visible, safe_text, visible


def test_escape_sequences_become_visible():
    assert visible("a\x1b[31mb") == "a\\x1b[31mb"
    assert visible("bell\x07\x9b") == "bell\\x07\\x9b"
    assert visible("rtl\u202eoverride") == "rtl\\u202eoverride"


def test_newlines_escaped_unless_kept():
    assert visible("a\nb\tc") == "a\\nb\\tc"
    assert visible("a\nb", keep_newlines=True) == "a\nb"


def test_printable_text_unchanged():
    assert visible("héllo wörld ✓") == "héllo wörld ✓"


def test_markup_is_not_interpreted():
    console = Console(record=True, width=80, color_system=None)
    console.print(safe_text("[bold red]x[/] \x1b]0;title\x07"))
    out = console.export_text()
    assert "[bold red]x[/]" in out
    assert "\\x1b]0;title\\x07" in out
    assert "\x1b" not in out


def test_invisible_characters_become_visible():
    # tag characters, zero-width space/joiner, word joiner, byte-order mark, bidi isolate, lone surrogate
    text = "a\U000e0041\U000e007f\u200b\u200d\u2060\ufeff\u2066\ud800b"
    assert visible(text) == "a\\U000e0041\\U000e007f\\u200b\\u200d\\u2060\\ufeff\\u2066\\ud800b"
    assert visible(text).isprintable()


def test_json_visible_escapes_c1_and_bidi_but_keeps_the_document():
    import json

    value = {"piece": "x\u009b\u202e\U000e0041\ud800y", "plain": "héllo ✓\n"}
    raw = json.dumps(value, ensure_ascii=False)
    shown = json_visible(raw)
    assert json.loads(shown) == value
    assert shown.isprintable()
    assert "héllo ✓" in shown
