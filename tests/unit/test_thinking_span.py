"""A reasoning model's thinking in its output tokens (engine/thinking.py): where it begins and ends, the
token the budget forces, and the reasoning_tokens usage counts from the parser's split (reply.py)."""

from __future__ import annotations

import pytest
from helpers import write_tokenizer

from trtserve.engine.errors import UserError
from trtserve.engine.thinking import ThinkingSpan
from trtserve.serve.openai.reply import ReplyPlan, reply_plan
from trtserve.serve.openai.tools import ToolPlan

OPEN, CLOSE = (7,), (8, 9)


def _span(**kw) -> ThinkingSpan:
    return ThinkingSpan(open_ids=OPEN, close_ids=CLOSE, **kw)


@pytest.mark.parametrize(
    ("kw", "output", "want"),
    [
        ({"starts_inside": True}, [], (0, None, 0, 0)),
        ({"starts_inside": True}, [3, 4, 8], (0, None, 2, 1)),  # the close tag's first token: not reasoning
        ({"starts_inside": True}, [3, 4, 8, 9, 5], (0, 4, 2, 0)),
        ({}, [], (None, None, 0, 0)),  # undecided: the reply may still open its thinking
        ({}, [7, 3, 8, 9, 5], (1, 4, 1, 0)),
        ({}, [3, 7, 8, 9], (None, 0, 0, 0)),  # the reply does not think: a later tag is answer text
    ],
)
def test_phase(kw, output, want):
    p = _span(**kw).phase(output)
    assert (p.reasoning_from, p.answer_from, p.reasoning_tokens, p.closing) == want


def test_the_budget_forces_the_close_tag_token_by_token():
    span = _span(starts_inside=True, budget=2)
    assert span.forced([3]) is None
    assert span.forced([3, 4]) == 8 and span.forced([3, 4, 8]) == 9
    assert span.forced([3, 4, 8, 9]) is None  # closed: the answer is free
    assert span.forced([8, 9, 3, 4]) is None  # closed by the model before its budget
    assert _span(starts_inside=True, budget=0).forced([]) == 8
    assert _span(budget=0).forced([]) is None and _span(budget=0).forced([7]) == 8  # only once opened
    assert _span(starts_inside=True).forced([3] * 50) is None  # no budget


def test_the_span_checks_itself():
    for bad in ({"open_ids": (), "close_ids": CLOSE}, {"open_ids": OPEN, "close_ids": CLOSE, "budget": -1}):
        with pytest.raises(UserError):
            ThinkingSpan(**bad)


class _Config:
    reasoning_parser = None


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("tok")
    write_tokenizer(d)
    t = AutoTokenizer.from_pretrained(d)
    t.chat_template = "{{ messages }}<think>"
    return t


def _plan(tok, prompt: str, constrained: bool = False) -> ReplyPlan:
    return reply_plan(tok, _Config(), ToolPlan(None, None, None), tok.encode(prompt), constrained)


def test_the_plan_carries_the_tags_and_a_grammar_keeps_the_think_parser(tok):
    plan = _plan(tok, "Hi <think>\n", constrained=True)
    assert plan.reasoning == "think" and plan.starts_inside
    span = plan.thinking_span(5, None)
    assert span == ThinkingSpan(
        open_ids=tuple(tok.encode("<think>")), close_ids=tuple(tok.encode("</think>")), starts_inside=True, budget=5
    )
    from trtserve.engine.sampling import GuidedDecoding

    assert plan.thinking_span(5, GuidedDecoding(kind="grammar", spec="root ::= x")) is None  # owns the thinking


@pytest.mark.parametrize(
    ("prompt", "reply", "reasoning"),
    [
        ("Hi <think>\n", "The quick brown fox</think>\n\nA model server.", "The quick brown fox"),
        ("Hi", "<think>Paged attention</think>The lazy dog.", "Paged attention"),
        ("Hi", "The lazy dog.", ""),
        ("Hi <think>\n", "never closed, all reasoning", "never closed, all reasoning"),
    ],
)
def test_reasoning_tokens_are_the_tokens_of_the_parsers_reasoning(tok, prompt, reply, reasoning):
    plan = _plan(tok, prompt)
    open_part = reply[: reply.index(reasoning)] if reasoning else ""
    ids = tok.encode(open_part) + tok.encode(reasoning) + tok.encode(reply[len(open_part) + len(reasoning) :])
    want = len(tok.encode(reasoning)) if reasoning else 0
    assert plan.reasoning_tokens(tok, ids, True) == want
    out = type("Out", (), {"outputs": [type("C", (), {"token_ids": ids})()]})()
    assert plan.usage_details(tok, [out], True) == {"completion_tokens_details": {"reasoning_tokens": want}}


def test_an_engine_without_the_thinking_capability_gets_no_span_and_refuses_a_budget(tok):
    from trtserve.serve.errors import APIError

    ids = tok.encode("Hi <think>\n")
    plan = reply_plan(tok, _Config(), ToolPlan(None, None, None), ids, False, engine_thinks=False)
    assert plan.reasoning == "think" and plan.thinking_span(None, None) is None
    with pytest.raises(APIError, match="no thinking budget"):
        plan.thinking_span(5, None)
    constrained = reply_plan(tok, _Config(), ToolPlan(None, None, None), ids, True, engine_thinks=False)
    assert constrained.reasoning == "none"  # its grammar applies from the first token: all answer
