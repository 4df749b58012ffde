"""engine/tokenizer.py (the tokenizer without transformers) equals transformers' AutoTokenizer, on
offline tokenizers built here: the tiny byte-level BPE of tests/helpers.py as saved, the same with a
tool-aware chat template (namespace, loop controls, tojson with indent, raise_exception), a pad and
an extra special token the config adds, add_bos_token in the config (transformers 5 leaves it to
tokenizer.json's post-processor) and a second EOS, and a Unigram tokenizer that cleans up
spaces. SmolLM2's (the demo engine's) is checked in tests/integration/test_tokenizer_smollm2.py."""

from __future__ import annotations

import json

import pytest
from helpers import write_tokenizer
from tokenizer_checks import check_same_as_hf, old_eos_ids

from trtserve.engine.rules import load_tokenizer

TOOL_TEMPLATE = """{%- set ns = namespace(system='') -%}
{%- if messages[0]['role'] == 'system' %}{% set ns.system = messages[0]['content'] %}{% endif -%}
{%- if tools %}{% set ns.system = ns.system ~ '\\nTools:\\n' ~ (tools | tojson(indent=2)) %}{% endif -%}
{{ bos_token }}{% if ns.system %}<|system|>{{ ns.system }}{{ eos_token }}
{% endif %}
{% for m in messages %}
    {% if m['role'] == 'system' %}{% continue %}{% endif %}
    {% if m['role'] not in ['user', 'assistant', 'tool'] %}{{ raise_exception('unknown role ' ~ m['role']) }}{% endif %}
    <|{{ m['role'] }}|>{{ m.get('content', '') }}
    {%- if m.tool_calls is defined %}{% for c in m.tool_calls %}<call>{{ c.function | tojson }}</call>{% endfor %}{% endif %}
{{ eos_token }}
{% endfor %}
{% if documents %}{% for d in documents %}[{{ d.title }}]{% endfor %}{% endif %}
{% if add_generation_prompt %}<|assistant|>{% endif %}"""


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-tok")
    write_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def tool_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tool-tok")
    write_tokenizer(d)
    (d / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg |= {"add_bos_token": True, "pad_token": "<pad>", "extra_special_tokens": ["<|tool|>"]}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    return d


@pytest.fixture(scope="module")
def unigram_dir(tmp_path_factory):
    from helpers import CORPUS
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>")
    tok.train_from_iterator(CORPUS + ["It's , isn't it ? Yes . No !"], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", clean_up_tokenization_spaces=True
    )
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    d = tmp_path_factory.mktemp("unigram-tok")
    fast.save_pretrained(d)
    return d


def test_tiny_byte_level_bpe_equals_transformers(tiny_dir):
    check_same_as_hf(tiny_dir)


def test_tool_template_bos_and_extra_tokens_equal_transformers(tool_dir):
    check_same_as_hf(tool_dir)


def test_unigram_with_clean_up_equals_transformers(unigram_dir):
    check_same_as_hf(unigram_dir)


@pytest.mark.parametrize("which", ["tiny_dir", "tool_dir", "unigram_dir"])
def test_eos_ids_equal_the_transformers_loader(which, request):
    path = request.getfixturevalue(which)
    tokenizer, eos = load_tokenizer(path)
    assert eos == old_eos_ids(path)
    assert type(tokenizer).__module__ == "trtserve.engine.tokenizer"


def test_template_errors_and_documents_as_transformers(tool_dir):
    from jinja2.exceptions import TemplateError
    from transformers import AutoTokenizer

    from trtserve.engine.tokenizer import Tokenizer

    ours, hf = Tokenizer(tool_dir), AutoTokenizer.from_pretrained(str(tool_dir))
    bad = [{"role": "narrator", "content": "x"}]
    for tok in (ours, hf):
        with pytest.raises(TemplateError, match="unknown role narrator"):
            tok.apply_chat_template(bad, tokenize=False)
    docs = [{"title": "Doc 1", "text": "a"}, {"title": "Über", "text": "b"}]
    conv = [{"role": "user", "content": "q"}]
    kw = {"documents": docs, "add_generation_prompt": True, "tokenize": False}
    assert ours.apply_chat_template(conv, **kw) == hf.apply_chat_template(conv, **kw)


def test_transformers_stays_unimported_until_the_full_tokenizer_is_asked_for(tiny_dir):
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from trtserve.engine.rules import load_tokenizer\n"
        f"tok, eos = load_tokenizer(Path({str(tiny_dir)!r}))\n"
        "tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], add_generation_prompt=True)\n"
        "before = 'transformers' in sys.modules\n"
        "hf = tok.huggingface()\n"
        "print(before, hf.get_vocab() == tok.get_vocab(), hf is tok.huggingface())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_a_dir_without_tokenizer_json_falls_back_to_transformers(tmp_path, caplog):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    write_tokenizer(tmp_path)  # then only the slow files stay: vocab.json and merges.txt
    Tokenizer.from_file(str(tmp_path / "tokenizer.json")).model.save(str(tmp_path))
    (tmp_path / "tokenizer.json").unlink()
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg | {"tokenizer_class": "GPT2Tokenizer"}))
    with caplog.at_level("INFO", logger="trtserve.engine.rules"):
        tokenizer, eos = load_tokenizer(tmp_path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path} has no tokenizer.json: loading the tokenizer with transformers"
    ]
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(tokenizer) is type(hf) and eos == old_eos_ids(tmp_path)
    assert tokenizer.encode("The quick brown fox") == hf.encode("The quick brown fox")
