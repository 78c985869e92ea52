"""A study's figures (plotly and Pillow; never imports torch): the headline plots, the paired study's slope
chart, one sample's trajectory and its animation, and the anchor marks they share.
"""
