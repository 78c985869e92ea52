"""Layer 1: group comparisons, mixed models, many pairs, paired tests, power (scipy, statsmodels).

Statistics: group comparisons with effect sizes (:mod:`.groups`), events and templates as
sources of variance (:mod:`.mixed`), many pairs with multiplicity corrections (:mod:`.multiple`),
paired comparisons of two configurations (:mod:`.paired`) and power by simulation (:mod:`.power`).
numpy, scipy and statsmodels only.
"""
