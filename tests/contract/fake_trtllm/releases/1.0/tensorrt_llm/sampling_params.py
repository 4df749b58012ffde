"""tensorrt_llm/sampling_params.py as of 1.0: greedy unless top_k or top_p asks otherwise."""

from trtllm_fake_core.facts import FACTS
from trtllm_fake_core.sampling import SamplingParamsBase


class SamplingParams(SamplingParamsBase):
    range_checks = FACTS["1.0"].sampling_range_checks  # 1.0 leaves the ranges to the C++ side

    @property
    def _greedy_decoding(self) -> bool:
        # 1.0's rule: temperature is not consulted, so temperature=0.7 with top_k/top_p unset is greedy
        return (
            not self.use_beam_search
            and (self.top_k is None or self.top_k == 1)
            and (self.top_p is None or self.top_p == 0.0)
        )
