"""tensorrt_llm/sampling_params.py as of 1.1: params_imply_greedy_decoding, and Python range checks."""

from trtllm_fake_core.facts import FACTS
from trtllm_fake_core.sampling import SamplingParamsBase


class SamplingParams(SamplingParamsBase):
    range_checks = FACTS["1.1"].sampling_range_checks  # _validate: top_p in [0, 1], top_k >= 0, temperature >= 0

    @property
    def _greedy_decoding(self) -> bool:
        # params_imply_greedy_decoding: nothing set, or top_k 1, or top_p 0, or temperature 0
        unset = self.temperature is None and self.top_p is None and self.top_k is None
        implied = unset or self.top_k == 1 or self.top_p == 0.0 or self.temperature == 0
        return not self.use_beam_search and implied
