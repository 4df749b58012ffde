"""`trtserve check`: engine-build checks for CI.

settings.py   the check config: a build config plus `target:` and `checks:`; did-you-mean errors
targets.py    device presets (h100-80gb, l4-24gb, cpu-32gb, ...) or explicit sizes
support.py    `support` (the build's own tables) and `plan` (the build planner, dry-run lines)
memory.py     `memory`: weights + activations + KV per device against the target
twin.py       the tiny random twin `smoke` builds; reference.py what it is compared with
smoke.py      `smoke`; full.py `full` (the real build, `trtserve eval`, `checks.expect`)
lock.py       `lock`: an engine.lock against now, as a diff
runner.py     the order and the skips; report.py the table, JSON and JUnit XML
"""
