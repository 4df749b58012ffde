"""tensorrt_llm/commands/serve.py on main after PR #15918: no tensorrt backend to choose. (The exact
choice list after the removal was not read; what matters here is that tensorrt and trt are gone.)"""

from trtllm_fake_core.facts import FACTS
from trtllm_fake_core.serve_cli import make_serve_command

main = make_serve_command(FACTS["main"])
