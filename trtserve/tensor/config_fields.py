"""Which ModelConfig fields trtserve honours. Every field a config.pbtxt sets is looked up here by its
dotted path, so a field that trtserve does not implement (or that a later Triton adds) is refused by
its name instead of being silently ignored."""

from __future__ import annotations

from google.protobuf.message import Message

from trtserve.engine.errors import UserError

# Field paths trtserve reads (a message listed here is walked into; its fields need their own entry).
# Map fields count as a whole when their values are scalars; message values are walked as the map's path.
HONOURED = frozenset(
    {
        "name",
        "platform",
        "backend",
        "version_policy",
        "version_policy.latest",
        "version_policy.latest.num_versions",
        "version_policy.all",
        "version_policy.specific",
        "version_policy.specific.versions",
        "max_batch_size",
        "default_model_filename",
        "parameters",
        *(f"input.{f}" for f in ("name", "data_type", "format", "dims", "optional", "reshape", "reshape.shape")),
        *(f"output.{f}" for f in ("name", "data_type", "dims", "label_filename", "reshape", "reshape.shape")),
        "input",
        "output",
        "dynamic_batching",
        *(
            f"dynamic_batching.{f}"
            for f in (
                "preferred_batch_size",
                "max_queue_delay_microseconds",
                "preserve_ordering",
                "priority_levels",
                "default_priority_level",
                "default_queue_policy",
                "priority_queue_policy",
            )
        ),
        *(
            f"dynamic_batching.{policy}.{f}"
            for policy in ("default_queue_policy", "priority_queue_policy")
            for f in ("timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size")
        ),
        "ensemble_scheduling",
        "ensemble_scheduling.step",
        *(f"ensemble_scheduling.step.{f}" for f in ("model_name", "model_version", "input_map", "output_map")),
        "instance_group",
        "instance_group.name",
        "instance_group.kind",
        "instance_group.count",
        # Walked into only to refuse what they set beyond their defaults (decoupled, cache enable, ...).
        "model_transaction_policy",
        "response_cache",
        "optimization",
        # Pinned host buffers and the gather-kernel threshold tune GPU copies: nothing to do on the CPU.
        "optimization.input_pinned_memory",
        "optimization.input_pinned_memory.enable",
        "optimization.output_pinned_memory",
        "optimization.output_pinned_memory.enable",
        "optimization.gather_kernel_buffer_threshold",
    }
)

# Why a refused field is refused and what to do instead; others get the generic sentence.
REASONS = {
    "sequence_batching": "trtserve serves stateless models only; remove it (use dynamic_batching)",
    "model_warmup": "trtserve sends no warmup requests; remove it",
    "response_cache.enable": "trtserve has no response cache; remove response_cache",
    "batch_input": "trtserve does not build ragged-batch inputs; remove it",
    "batch_output": "trtserve does not split ragged-batch outputs; remove it",
    "model_repository_agents": "trtserve runs no repository agents; remove it",
    "model_transaction_policy.decoupled": "trtserve answers each request with one response; remove it",
    "optimization.execution_accelerators": (
        "tensor models run on ONNX Runtime's CPU provider here; remove it "
        "(`trtserve build model.onnx --backend tensorrt --dry-run` plans a TensorRT engine)"
    ),
    "optimization.cuda": "CUDA graphs need a GPU and tensor models run on the CPU here; remove it",
    "optimization.graph": "trtserve runs ONNX Runtime at its full graph optimization level; remove it",
    "optimization.priority": "trtserve has no rate limiter that uses it; remove it",
    "optimization.eager_batching": "the dynamic batcher here always forms the largest batch it can; remove it",
    "input.is_shape_tensor": "shape tensors are a TensorRT feature; remove it",
    "input.allow_ragged_batch": "trtserve batches only requests of equal shapes; remove it",
    "instance_group.gpus": "tensor models run on the CPU here; remove gpus (kind KIND_CPU)",
    "instance_group.rate_limiter": "trtserve has no rate limiter; remove it",
    "ensemble_scheduling.step.model_namespace": "trtserve's repository has one namespace; remove it",
    "ensemble_scheduling.max_inflight_requests": "ensembles here take no in-flight limit; remove it",
    "runtime": "trtserve picks the runtime from backend / platform; remove it",
}


def refuse_unsupported(msg: Message, where: str) -> None:
    """UserError naming the first field set in `msg` (a ModelConfig) that trtserve does not honour."""
    _walk(msg, "", where)


def _walk(msg: Message, prefix: str, where: str) -> None:
    for fd, value in msg.ListFields():
        path = prefix + fd.name
        if path not in HONOURED:
            why = REASONS.get(path, "trtserve does not support it; remove it")
            raise UserError(f"{where}: config.pbtxt sets {path}, which trtserve does not honour: {why}")
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].message_type is not None and path != "parameters":
                for item in value.values():
                    _walk(item, path + ".", where)
        elif fd.is_repeated:
            for item in value:
                _walk(item, path + ".", where)
        else:
            _walk(value, path + ".", where)
