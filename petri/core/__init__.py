"""Layer 1: the record of a sampling request, the dish, cancellation, where shipped files lie (numpy only).

The core: the record of a sampling request (:mod:`.trajectory`, with the built-in families'
settings), how a family's settings are described so every surface can be made from them
(:mod:`.settings`), the dish that pins concepts on the canvas (:mod:`.dish`), cancellation
(:mod:`.cancel`), where shipped files lie (:mod:`.paths`) and the configuration the environment
gives (:mod:`.config`, pydantic). numpy only otherwise; every other layer builds on these.
"""
