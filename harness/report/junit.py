"""A run as JUnit XML (`run --junit-xml F`): what CI systems show as a test report.

One test suite per run, one test case per (configuration, probe) row: the class is the
configuration, the name the probe. A *different* or *error* row is a failure whose text is the
row's reason, as report.md words it; *n/a* is skipped with its reason; *same* and *unknown* pass
(as the exit code has them), an *unknown* row's reason kept in its output. A planned pair the
run's evidence does not judge is a *missing* row, a failure; and a record that is no pass (killed,
rows dropped, no plan, judged with other parameters than its suite's: `completeness`) carries one
more test case, `record` / `complete`, failed with what it lacks: a CI reader sees red, not the
rows it has.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Sequence

from harness import completeness
from harness.report.rows import MISSING, Row, gap_items, headline, rows
from harness.results import RunResult
from harness.textfmt import displayable, printable
from harness.verdict_stats import Verdict

FAILING = (Verdict.DIFFERENT.value, Verdict.ERROR.value, MISSING)


def xml_text(text: str) -> str:
    """Text any XML 1.0 reader takes: control characters escaped (`printable`: a server's
    coloured log line in a reason would make the file not well-formed, and a CI reader rejects
    it whole), undecodable bytes as U+FFFD; ElementTree escapes the markup."""
    return printable(displayable(text))


def junit_xml(result: RunResult, also: Sequence[str] = ()) -> str:
    """`also`: what keeps the run from being a pass beside its record's own gaps."""
    suite = suite_element(result, also)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def junit_xml_runs(results: list[RunResult]) -> str:
    """Several runs (a matrix entry's suites) as one JUnit file: a <testsuite> each."""
    suites = ET.Element("testsuites")
    suites.extend(suite_element(result) for result in results)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def suite_element(result: RunResult, also: Sequence[str] = ()) -> ET.Element:
    table = rows(result)
    cases = [case_element(row) for row in table]
    found = [*completeness.gaps(result), *also]
    if found:
        cases.append(record_case(result, found, also))
    suite = ET.Element("testsuite", {
        "name": xml_text(f"detcheck {result.suite} ({result.target}): {result.base.short} → {result.candidate.short}"),
        "tests": str(len(cases)),
        "failures": str(sum(row.verdict in FAILING for row in table) + bool(found)),
        "errors": "0",
        "skipped": str(sum(row.verdict == Verdict.NOT_APPLICABLE.value for row in table)),
    })
    suite.extend(cases)
    return suite


def record_case(result: RunResult, found: list[str], also: Sequence[str]) -> ET.Element:
    """The test case of the record itself: failed, its message the headline, its text every gap."""
    case = ET.Element("testcase", {"classname": "record", "name": "complete"})
    failure = ET.SubElement(case, "failure", {"message": xml_text(headline(result, also)), "type": "incomplete"})
    failure.text = xml_text("\n".join(gap_items(found)))
    return case


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
