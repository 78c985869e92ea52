"""A study's numbers and report: the tidy tables, the statistics a reviewer asks for (unpaired and paired),
the provisional numbers while it runs, two runs side by side, and the written report.
"""
