"""tensorrt_llm/commands/build.py (1.1): the `trtllm-build` console script's `main`."""

from trtllm_fake_core import build_cli


def main() -> None:
    import tensorrt_llm

    build_cli.main(tensorrt_llm.__version__)  # engine config.json records the building release
