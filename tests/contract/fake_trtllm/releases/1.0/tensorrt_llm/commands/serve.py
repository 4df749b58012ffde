"""tensorrt_llm/commands/serve.py (1.0): --backend is a plain click.Choice of pytorch|trt|_autodeploy
(PR #7829 renamed trt to tensorrt on 2025-09-18, after 1.0 was cut)."""

from trtllm_fake_core.facts import FACTS
from trtllm_fake_core.serve_cli import make_serve_command

main = make_serve_command(FACTS["1.0"])
