"""Reports: from a run directory's trials to figures, tables and conclusions
(`build`), and before/after comparisons of two runs (`compare`)."""
from fwbench.report.build import ReportFiles, build, parse_pairs

__all__ = ["ReportFiles", "build", "parse_pairs"]
