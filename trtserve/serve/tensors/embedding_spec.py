"""What a tensor model's config says about serving it as an embedder (docs/tensor-models.md,
"Embeddings"): read by /v1/embeddings and by the pooling endpoints' tensor models."""

from __future__ import annotations

from dataclasses import dataclass

from trtserve.tensor.types import TensorModelConfig


@dataclass(frozen=True)
class EmbeddingSpec:
    """An embedding model as its config describes it."""

    output: str  # the FP32 output holding one vector per input
    size: int  # its length
    text_input: str | None  # the BYTES input texts go to; None: token arrays only
    token_inputs: tuple[str, str] | None  # (ids, mask) tensors token arrays go to; None: text only
    mask_output: str | None  # an output holding the attention mask: its sum is the usage's token count
    matryoshka: bool  # any `dimensions` up to `size` by truncation and renormalization
    vocab_size: int | None  # token ids must be below it, when given

    @classmethod
    def of(cls, config: TensorModelConfig) -> EmbeddingSpec | None:
        """None when the model is no embedding model: no single vector-shaped FP32 output, or no
        text input and no token inputs."""
        p = config.parameters
        vectors = [t for t in config.outputs if t.datatype == "FP32" and len(t.dims) == 1 and t.dims[0] > 0]
        out = (
            config.output(p["embedding_output"])
            if "embedding_output" in p
            else (vectors[0] if len(vectors) == 1 else None)
        )
        if out is None or out.datatype != "FP32" or len(out.dims) != 1 or out.dims[0] <= 0:
            return None
        texts = [t.name for t in config.inputs if t.datatype == "BYTES"]
        text_input = p.get("text_input") or (texts[0] if len(config.inputs) == 1 and texts else None)
        names = {t.name for t in config.inputs}
        tokens = tuple(n.strip() for n in p["token_inputs"].split(",")) if "token_inputs" in p else None
        if tokens is None and names == {"input_ids", "attention_mask"}:
            tokens = ("input_ids", "attention_mask")
        if tokens is not None and len(tokens) != 2:
            tokens = None
        if text_input is None and tokens is None:
            return None  # nothing to send text or token ids to (a classifier, say)
        mask = tokens[1] if tokens and config.output(tokens[1]) is not None else None
        vocab = p.get("vocab_size", "")
        return cls(
            output=out.name,
            size=out.dims[0],
            text_input=text_input,
            token_inputs=tokens,
            mask_output=mask,
            matryoshka=p.get("matryoshka", "").lower() == "true",
            vocab_size=int(vocab) if vocab.isdigit() else None,
        )
