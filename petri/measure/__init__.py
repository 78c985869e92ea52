"""Layer 1: flips, segments, anchors, the tidy tables, the step-by-step record, nouns (numpy, pandas).

Measurement: what a trajectory says about where the model struggled. Flips, segments and
anchors (:mod:`.metrics`), the tidy tables (:mod:`.tables`), the step-by-step record a viewer reads
(:mod:`.replay`) and template sensitivity by nouns (:mod:`.nouns`). numpy and pandas only.
"""
