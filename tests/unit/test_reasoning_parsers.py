"""Reasoning parsers (text/reasoning.py): reasoning and answer split the same however the text is
chunked (hypothesis), templates that open `<think>` in the prompt, gpt-oss's channels, and the
parser a chat template implies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.text.reasoning import REASONING_PARSERS, opens_reasoning, reasoning_parser_of_template
from trtserve.text.tool_parsers import new_tool_parser

HARMONY = (
    "<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant<|channel|>commentary"
    ' to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
# parser, starts inside <think>, model text, reasoning, content
CASES = [
    ("think", False, "<think>\nLet me think.\n</think>\n\nThe answer is 4.", "Let me think.", "The answer is 4."),
    ("think", False, "No thinking here <think> at all", "", "No thinking here <think> at all"),
    ("think", False, "<think>\n\n</think>\n\nEmpty thought.", "", "Empty thought."),
    ("think", False, "<think>cut off while thinking", "cut off while thinking", ""),
    ("think", True, "Prompt opened it.\n</think>\nAnswer.", "Prompt opened it.", "Answer."),
    ("think", True, "<think>Wrote it anyway</think>Answer.", "Wrote it anyway", "Answer."),
    ("think", True, "never closed", "never closed", ""),
    (
        "harmony",
        False,
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi there.<|return|>",
        "Think.",
        "Hi there.",
    ),
    ("none", False, "<think>x</think>y", "", "<think>x</think>y"),
]


def run(name: str, inside: bool, pieces: list[str]) -> tuple[str, str]:
    parser = REASONING_PARSERS[name](inside)
    reasoning, content = "", ""
    for piece in pieces:
        r, c = parser.feed(piece)
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    return reasoning + r, content + c


@pytest.mark.parametrize("name, inside, text, reasoning, content", CASES)
def test_whole_and_one_character_at_a_time(name, inside, text, reasoning, content):
    assert run(name, inside, [text]) == run(name, inside, list(text)) == (reasoning, content)
    assert REASONING_PARSERS[name](inside).parse(text) == (reasoning, content)


@pytest.mark.parametrize("name, inside, text, reasoning, content", CASES)
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_any_chunking_gives_the_same_split(name, inside, text, reasoning, content, cuts):
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert run(name, inside, pieces) == (reasoning, content)


@settings(max_examples=200, deadline=None)
@given(
    thought=st.text(alphabet="ab <>/thinkc\n", max_size=30),
    answer=st.text(alphabet="ab <>/thinkc\n", max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=8),
    inside=st.booleans(),
)
def test_arbitrary_think_text_splits_the_same_streamed(thought, answer, cuts, inside):
    """Text built from the tags' own characters, so that partial tags appear everywhere."""
    text = f"<think>{thought}</think>{answer}"
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    whole = run("think", inside, [text])
    assert run("think", inside, pieces) == whole
    if text.find("</think>") == len("<think>") + len(thought):  # the tag closes where it was written
        assert whole == (thought.strip(), answer.lstrip())


def test_harmony_reasoning_hands_calls_to_the_harmony_tool_parser():
    reasoning, content = run("harmony", False, list(HARMONY))
    assert reasoning == "The user wants weather."
    tools = new_tool_parser("harmony")
    shown, calls = tools.parse(content)
    assert shown == "" and [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Paris"}')]
    no_tools = REASONING_PARSERS["harmony"](False, keep_calls=False)
    assert no_tools.parse(HARMONY) == ("The user wants weather.", "")


def test_parser_follows_the_template_and_the_prompt():
    assert reasoning_parser_of_template("{% if enable_thinking %}<think>{% endif %}") == "think"
    assert reasoning_parser_of_template("<|start|>{{ '<|channel|>' }}") == "harmony"
    assert reasoning_parser_of_template("{{ messages }}") == reasoning_parser_of_template(None) == "none"
    assert opens_reasoning("<|im_start|>assistant\n<think>\n", "think")
    assert not opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n", "think")
    assert not opens_reasoning("<think>\n", "none")
