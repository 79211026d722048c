"""Reports: matplotlib figures and self-contained HTML pages."""

from sglab.report.html import render_results, write_report

__all__ = ["render_results", "write_report"]
