"""Layer 3: study files run as events x templates x samples, resumable; their numbers, figures and report.

Studies: a study file (:mod:`.schema`) run as events x templates x samples, one resumable
batch per (event, template) (:mod:`.runner`), here or on Ray (:mod:`.executors`); its numbers
(:mod:`.analysis`, :mod:`.statistics`), figures (:mod:`.plots`) and report (:mod:`.report`).
"""
