"""The widgets several tabs share: the canvas control, the trajectory viewer, the figure downloads and the
slow button that says it is working.
"""
