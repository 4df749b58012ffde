"""tensorrt_llm/commands/serve.py (1.2): --backend pytorch|tensorrt|_autodeploy, `trt` an alias of tensorrt."""

from trtllm_fake_core.facts import FACTS
from trtllm_fake_core.serve_cli import make_serve_command

main = make_serve_command(FACTS["1.2"])
