"""The Probe tab: the tab itself and its pure pieces (the question editor's rows, the answers' tables).
"""
