"""The check's outputs: a table for people, JSON for programs, JUnit XML for CI systems.

JUnit: one <testsuite> per config, one <testcase> per check (classname `trtserve.check.<config
stem>`), a failed check's message in <failure message=...> with its detail as the text, a skipped
one's reason in <skipped message=...>, and a passed check's detail (a plan) in <system-out>; the
attributes Jenkins' and GitLab's JUnit readers count (tests, failures, errors, skipped, time).
"""

from __future__ import annotations

import json
import socket
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trtserve.check.result import ConfigReport, Status

_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.SKIP: "yellow"}


def summary(reports: list[ConfigReport]) -> dict:
    results = [r for report in reports for r in report.results]
    count = {s: sum(r.status is s for r in results) for s in Status}
    return {
        "configs": len(reports),
        "checks": len(results),
        "passed": count[Status.PASS],
        "failed": count[Status.FAIL],
        "skipped": count[Status.SKIP],
    }


def print_table(reports: list[ConfigReport], console: Console, details: bool = False) -> None:
    """One table per config; failed checks' details (lock diffs) after it, every detail with `details`."""
    for report in reports:
        title = report.config + (f" (target {report.target})" if report.target else "")
        table = Table(title=title, title_justify="left", expand=False)
        for col, kw in (
            ("check", {}),
            ("status", {}),
            ("message", {"overflow": "fold"}),
            ("time", {"justify": "right"}),
        ):
            table.add_column(col, **kw)
        for r in report.results:
            status = f"[{_STYLE[r.status]}]{r.status}[/]"
            table.add_row(r.name, status, r.message, f"{r.seconds:.1f}s" if r.status is not Status.SKIP else "")
        console.print(table)
        for r in report.results:
            if r.detail and (details or r.status is Status.FAIL):
                console.print(f"[bold]{r.name}[/] detail:", highlight=False)
                console.print(r.detail, markup=False, highlight=False)
    s = summary(reports)
    verdict = "[bold red]FAILED[/]" if s["failed"] else "[green]OK[/]"
    console.print(
        f"{verdict}: {s['configs']} configs, {s['checks']} checks: "
        f"{s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped"
    )


def to_json(reports: list[ConfigReport], level: str) -> dict:
    return {
        "level": level,
        "ok": not any(r.failed for r in reports),
        "summary": summary(reports),
        "configs": [r.to_dict() for r in reports],
    }


def write_json(reports: list[ConfigReport], level: str, path: Path) -> None:
    _write(path, json.dumps(to_json(reports, level), indent=2) + "\n")


def to_junit(reports: list[ConfigReport], level: str) -> ET.Element:
    s = summary(reports)
    total = sum(r.seconds for report in reports for r in report.results)
    root = ET.Element("testsuites", _counts("trtserve check", s, total))
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    for report in reports:
        seconds = sum(r.seconds for r in report.results)
        suite = ET.SubElement(root, "testsuite", _counts(report.config, summary([report]), seconds))
        suite.set("timestamp", stamp)
        suite.set("hostname", socket.gethostname())
        props = ET.SubElement(suite, "properties")
        for name, value in (("level", level), ("target", report.target or "")):
            ET.SubElement(props, "property", name=name, value=value)
        classname = f"trtserve.check.{Path(report.config).stem}"
        for r in report.results:
            case = ET.SubElement(suite, "testcase", name=r.name, classname=classname, time=f"{r.seconds:.3f}")
            if r.status is Status.FAIL:
                ET.SubElement(case, "failure", message=r.message, type="CheckFailed").text = r.detail or r.message
            elif r.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=r.message)
            elif r.detail:
                ET.SubElement(case, "system-out").text = r.detail
    return root


def write_junit(reports: list[ConfigReport], level: str, path: Path) -> None:
    root = to_junit(reports, level)
    ET.indent(root)
    _write(path, '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n")


def _counts(name: str, s: dict, seconds: float) -> dict[str, str]:
    return {
        "name": name,
        "tests": str(s["checks"]),
        "failures": str(s["failed"]),
        "errors": "0",
        "skipped": str(s["skipped"]),
        "time": f"{seconds:.3f}",
    }


def _write(path: Path, text: str) -> None:
    """Write whole or not at all (a CI step reading the report never sees half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
