"""The probe's evaluation on a labelled set: the sets, the per-item predictions and scores, and the files
they are written to.
"""
