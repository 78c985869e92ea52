"""Running a study: the runner (events x templates x samples, one resumable batch per (event, template))
and where its batches run, in this process or on a Ray cluster.
"""
