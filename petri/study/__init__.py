"""Layer 3: study files run as events x templates x samples, resumable; their numbers, figures and report.

Studies: a study file (:mod:`.schema`) run as events x templates x samples, one resumable
batch per (event, template) (:mod:`.execution.runner`), here or on Ray (:mod:`.execution.executors`); its numbers
(:mod:`.results.analysis`, :mod:`.results.statistics`), figures (:mod:`.figures.plots`) and report (:mod:`.results.report`).
"""
