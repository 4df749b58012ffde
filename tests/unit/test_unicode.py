"""serve/unicode.py: a lone surrogate is refused wherever it sits, and JSON text without a surrogate
escape is not walked at all."""

import json

import pytest

from trtserve.serve import unicode
from trtserve.serve.unicode import check_unicode


@pytest.mark.parametrize("escape", ["\\ud800", "\\uDFFF", "\\uDbff"])
def test_a_lone_surrogate_escape_is_refused_naming_its_field(escape):
    raw = ('{"inputs": [{"name": "x", "data": ["ok", "' + escape + '"]}]}').encode()
    with pytest.raises(ValueError, match=r"inputs\[0\]\.data\[1\] holds a lone UTF-16 surrogate"):
        check_unicode(json.loads(raw), raw)


def test_text_without_a_surrogate_escape_is_not_walked(monkeypatch):
    walked = []
    monkeypatch.setattr(unicode, "lone_surrogate_at", lambda obj: walked.append(obj))
    raw = b'{"a": "caf\\u00e9 \\ud7ff \\ue000", "b": [1.5, 2]}'
    check_unicode(json.loads(raw), raw)
    assert walked == []
    check_unicode(json.loads(raw))  # without the text, the object is walked
    assert len(walked) == 1


def test_a_valid_surrogate_pair_passes():
    raw = b'{"emoji": "\\ud83d\\ude00"}'
    check_unicode(json.loads(raw), raw)
