"""A run as JUnit XML (`run --junit-xml F`): what CI systems show as a test report.

One test suite per run, one test case per (configuration, probe) row: the class is the
configuration, the name the probe. A *different* or *error* row is a failure whose text is the
row's reason, as report.md words it; *n/a* is skipped with its reason; *same* and *unknown* pass
(as the exit code has them), an *unknown* row's reason kept in its output.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from harness.report.rows import Row, rows
from harness.results import RunResult
from harness.textfmt import displayable, printable
from harness.verdict_stats import Verdict

FAILING = (Verdict.DIFFERENT.value, Verdict.ERROR.value)


def xml_text(text: str) -> str:
    """Text any XML 1.0 reader takes: control characters escaped (`printable`: a server's
    coloured log line in a reason would make the file not well-formed, and a CI reader rejects
    it whole), undecodable bytes as U+FFFD; ElementTree escapes the markup."""
    return printable(displayable(text))


def junit_xml(result: RunResult) -> str:
    suite = suite_element(result)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def junit_xml_runs(results: list[RunResult]) -> str:
    """Several runs (a matrix entry's suites) as one JUnit file: a <testsuite> each."""
    suites = ET.Element("testsuites")
    suites.extend(suite_element(result) for result in results)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def suite_element(result: RunResult) -> ET.Element:
    table = rows(result)
    suite = ET.Element("testsuite", {
        "name": xml_text(f"detcheck {result.suite} ({result.target}): {result.base.short} → {result.candidate.short}"),
        "tests": str(len(table)),
        "failures": str(sum(row.verdict in FAILING for row in table)),
        "errors": "0",
        "skipped": str(sum(row.verdict == Verdict.NOT_APPLICABLE.value for row in table)),
    })
    for row in table:
        suite.append(case_element(row))
    return suite


def case_element(row: Row) -> ET.Element:
    case = ET.Element("testcase", {"classname": xml_text(row.config), "name": xml_text(row.probe)})
    if row.verdict in FAILING:
        failure = ET.SubElement(case, "failure", {"message": xml_text(f"{row.verdict}: {row.note}"),
                                                  "type": row.verdict})
        failure.text = xml_text(f"base: {row.base}\ncandidate: {row.candidate}\n{row.note}")
    elif row.verdict == Verdict.NOT_APPLICABLE.value:
        ET.SubElement(case, "skipped", {"message": xml_text(row.note or f"{row.base}; {row.candidate}")})
    elif row.note:
        ET.SubElement(case, "system-out").text = xml_text(f"{row.verdict}: {row.note}")
    return case
