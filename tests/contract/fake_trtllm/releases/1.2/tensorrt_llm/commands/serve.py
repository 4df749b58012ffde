"""tensorrt_llm/commands/serve.py (1.2): --backend pytorch|tensorrt|_autodeploy, `trt` an alias of tensorrt."""

from trtllm_fake_core.serve_cli import ChoiceWithAlias, make_serve_command

main = make_serve_command(ChoiceWithAlias(["pytorch", "tensorrt", "_autodeploy"], {"trt": "tensorrt"}))
