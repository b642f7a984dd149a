"""`walkthrough.words`: a count agrees with its noun (issue 13 item 12, "1 chunks")."""

from __future__ import annotations

import pytest

from walkthrough.words import count, noun


@pytest.mark.parametrize(("n", "singular", "plural", "expected"), [
    (0, "chunk", None, "0 chunks"),
    (1, "chunk", None, "1 chunk"),
    (2, "chunk", None, "2 chunks"),
    (1, "pass", "passes", "1 pass"),
    (3, "pass", "passes", "3 passes"),
    (1200, "prompt token", None, "1,200 prompt tokens"),
])
def test_count_agrees_with_its_noun(n, singular, plural, expected):
    assert count(n, singular, plural) == expected
    assert noun(n, singular, plural) == expected.split(" ", 1)[1]
