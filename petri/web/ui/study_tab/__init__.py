"""The Study tab: the tab itself, its paired-study views, its summaries, the reviewer's statistics panel and
the shipped study run it shows first.
"""
