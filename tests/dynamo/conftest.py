"""The Dynamo lane (marker `dynamo`): Dynamo's frontend and `trtserve dynamo` workers as processes on
127.0.0.1, shared per module (dynamo_cluster.py). Skipped, with the reason, where Dynamo is missing or
its frontend cannot start."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/dynamo/" in str(item.fspath):
            item.add_marker(pytest.mark.dynamo)
