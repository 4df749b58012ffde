"""Offline generation: `trtserve.LLM(engine_dir).generate(prompts, SamplingParams(...))`.

Drives the same engine core and output processing as the server, synchronously.
"""

from __future__ import annotations

from pathlib import Path

from trtserve.engine.messages import GenerateRequest, RequestId
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine
from trtserve.text.outputs import OutputProcessor, RequestOutput


class LLM:
    def __init__(self, engine_dir: str | Path, config: RuntimeConfig | None = None, **overrides):
        cfg = (config or RuntimeConfig()).model_copy(update=overrides)
        self.engine = load_engine(engine_dir, cfg.device, cfg.deterministic)
        self.tokenizer = self.engine.tokenizer
        self.core = EngineCore(self.engine, cfg)

    def encode(self, prompt: str | list[int], chat: bool = False) -> list[int]:
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        if chat:
            messages = [{"role": "user", "content": prompt}]
            enc = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=True
            )
            return list(enc["input_ids"])
        return list(self.tokenizer.encode(prompt))

    def generate(
        self,
        prompts: str | list[int] | list[str] | list[list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
        chat: bool = False,
    ) -> list[RequestOutput]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        procs: dict[RequestId, OutputProcessor] = {}
        for prompt, p in zip(prompts, plist, strict=True):
            ids = self.encode(prompt, chat)
            req = GenerateRequest(ids, p)
            self.core.add_request(req)
            procs[req.request_id] = OutputProcessor(self.tokenizer, str(req.request_id), ids, p)
        order = list(procs)
        while self.core.has_unfinished():
            for d in self.core.step():
                proc = procs[d.request_id]
                proc.process(d)
                if proc.stopped_by_string(d.index) and d.finish_reason is None:
                    self.core.abort(d.request_id, d.index)
        return [procs[r].output for r in order]
