"""Run the checks of each config, in order, each skipped (with the reason) when a check it needs
did not pass:

    schema -> support -> plan -> memory (needs a target)
                              -> smoke  (--level smoke and full)
                              -> full   (--level full)
                              -> lock   (needs --lock or checks.lock; with --level full, the
                                         files `full` built are compared too)

Every config file is read before any check runs, so an unreadable one is a usage error (exit 2)
rather than a failed check.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trtserve.build.planner import BuildPlan
from trtserve.check.lock import read_lock
from trtserve.check.result import CheckFailed, CheckResult, ConfigReport, Outcome, Skipped, Status, timed
from trtserve.check.settings import CHECKS, CheckConfig, effective_target, validate
from trtserve.check.targets import Target, resolve_target
from trtserve.engine.config_file import read_yaml
from trtserve.engine.errors import UserError
from trtserve.engine.manifest import MANIFEST

LEVELS = ("plan", "smoke", "full")
_LEVEL_NEEDED = {"smoke": "smoke", "full": "full"}  # check -> the lowest --level that runs it (others: plan)
_NEEDS = {"plan": "support", "memory": "plan", "smoke": "plan", "full": "plan", "lock": "plan"}


@dataclass(frozen=True)
class Options:
    level: str = "plan"
    target: str | None = None  # --target: a preset or a size; wins over each config's `target:`
    lock: Path | None = None  # --lock: the engine.lock of the one config given
    work_dir: Path | None = None  # where `full` builds engines; None: a temporary dir, removed after


def run_checks(paths: list[Path], options: Options) -> list[ConfigReport]:
    """Check every config; UserError for a usage error (bad option, unreadable file)."""
    if options.level not in LEVELS:
        raise UserError(f"--level {options.level!r} is not one of {', '.join(LEVELS)}")
    if options.target is not None:
        try:
            resolve_target(options.target)
        except ValueError as err:
            raise UserError(f"--{err}") from None  # "--target 'x' is neither a preset nor a size; ..."
    if options.lock is not None:
        if len(paths) != 1:
            raise UserError("--lock names the lock of one config; check one config with it, or set checks.lock in each")
        read_lock(options.lock)  # an unreadable --lock is a usage error, not a drift
    files = [(path, read_yaml(path)) for path in paths]
    with _work_dir(options.work_dir) as work:
        references = _References(work)
        return [ConfigRun(i, path, data, options, work, references).run() for i, (path, data) in enumerate(files)]


class ConfigRun:
    """The checks of one config file."""

    def __init__(self, index: int, path: Path, data: dict, options: Options, work: Path, references: _References):
        self.path, self.data, self.options, self.references = path, data, options, references
        self.engine_dir = work / f"engine-{index}-{path.stem}"  # where `full` builds
        self.cfg: CheckConfig | None = None
        self.target: Target | None = None
        self.plan: BuildPlan | None = None
        self.built: Path | None = None  # the engine `full` built
        self.results: dict[str, CheckResult] = {}

    def run(self) -> ConfigReport:
        cfg, problems = validate(self.data)
        self.cfg = cfg
        self.results["schema"] = timed("schema", lambda: self._schema(problems))
        if cfg is not None:
            self.target = effective_target(cfg, self.options.target)  # both were validated
        for name in CHECKS[1:]:
            self.results[name] = self._run_one(name)
        target = self.target.name if self.target else None
        return ConfigReport(str(self.path), target, list(self.results.values()))

    def _run_one(self, name: str) -> CheckResult:
        why = self._why_not(name)
        if why is not None:
            return CheckResult(name, Status.SKIP, why)
        return timed(name, getattr(self, "_" + name))

    def _why_not(self, name: str) -> str | None:
        if self.results["schema"].status is not Status.PASS:
            return "the config does not validate (see schema)"
        level = _LEVEL_NEEDED.get(name)
        if level is not None and LEVELS.index(self.options.level) < LEVELS.index(level):
            return f"runs at --level {level}"
        if name in self.cfg.checks.skip:
            return "skipped by the config's checks.skip"
        needed = _NEEDS.get(name)
        if needed is not None and self.results[needed].status is Status.FAIL:
            return f"needs {needed}, which failed"
        if needed == "plan" and self.plan is None:
            return "needs plan, which did not run"
        return None

    def _schema(self, problems: list[str]) -> Outcome:
        if problems:
            raise CheckFailed("; ".join(problems))
        return Outcome(f"{len(self.data)} keys valid")

    def _support(self) -> Outcome:
        from trtserve.check.support import check_support

        return check_support(self.cfg.build_config(), self.target)

    def _plan(self) -> Outcome:
        from trtserve.check.support import check_plan

        outcome, self.plan = check_plan(self.cfg.build_config())
        return outcome

    def _memory(self) -> Outcome:
        from trtserve.check.memory import check_memory

        if self.target is None:
            raise Skipped("no target; give --target or set `target:` (a preset like l4-24gb, or a size)")
        return check_memory(self.plan, self.target)

    def _smoke(self) -> Outcome:
        from trtserve.check.smoke import check_smoke

        with tempfile.TemporaryDirectory(prefix="trtserve-smoke-") as tmp:
            return check_smoke(self.plan, self.cfg.checks.smoke, Path(tmp))

    def _full(self) -> Outcome:
        from trtserve.check.full import check_full

        try:
            return check_full(self.cfg.build_config(), self.cfg.checks.expect, self.engine_dir, self.references.get)
        finally:  # built but below the thresholds: `lock` still compares its files
            if (self.engine_dir / MANIFEST).is_file():
                self.built = self.engine_dir

    def _lock(self) -> Outcome:
        from trtserve.check.lock import check_lock

        path = self.options.lock or self.cfg.checks.lock
        if path is None:
            raise Skipped("no lock; give --lock FILE or set checks.lock")
        return check_lock(path, self.plan, self.built)


class _References:
    """Engines of `checks.expect.reference` configs, each built once per run."""

    def __init__(self, work: Path):
        self.work = work
        self.built: dict[Path, Path] = {}

    def get(self, config: Path) -> Path:
        from trtserve.build.builder import build_engine

        key = Path(config).resolve()
        if key not in self.built:
            cfg, problems = validate(read_yaml(config))
            if cfg is None:
                raise UserError(f"the reference config {config} does not validate: {'; '.join(problems)}")
            out = self.work / f"reference-{len(self.built)}-{key.stem}"
            build_engine(cfg.build_config(), out, force=True, quiet=True)
            self.built[key] = out
        return self.built[key]


@contextlib.contextmanager
def _work_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="trtserve-check-") as tmp:
        yield Path(tmp)
