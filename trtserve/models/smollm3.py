"""SmolLM3 family: Llama's layout and names, with some layers (HF `no_rope_layers`, by default every
`no_rope_layer_interval`-th) attending without RoPE."""

from trtserve.engine.errors import UserError
from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MLP_BIAS, NOPE_LAYERS, ROPE_SCALING, TIED_EMBEDDINGS
from trtserve.models.layout import LLAMA


def _config(hf) -> dict:
    """ModelConfig.rope_skip_layers from HF's per-layer flags (1: the layer uses RoPE, 0: it does not)."""
    flags = list(getattr(hf, "no_rope_layers", None) or [])
    if len(flags) != hf.num_hidden_layers or any(f not in (0, 1) for f in flags):
        raise UserError(
            f"no_rope_layers must hold a 0 or 1 for each of the {hf.num_hidden_layers} layers, not {flags!r}; fix config.json"
        )
    return {"rope_skip_layers": [i for i, f in enumerate(flags) if not f]}


FAMILY = DecoderFamily(
    name="smollm3",
    hf_architectures=("SmolLM3ForCausalLM",),
    trtllm_architecture="SmolLM3ForCausalLM",
    layout=LLAMA,
    hf=llama.HF_NAMES,
    # llama.cpp converts SmolLM3 as Llama (q/k rows permuted) and fixes the NoPE interval at 4, HF's default
    gguf=GGUFNames("smollm3", llama.GGUF_NAMES, permuted_qk=True),
    features=llama.FEATURES | {NOPE_LAYERS},
    config_features=frozenset({MLP_BIAS, TIED_EMBEDDINGS, ROPE_SCALING}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
