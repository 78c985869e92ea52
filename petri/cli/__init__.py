"""Layer 5: the ``petri`` command.

An edge: the ``petri`` command (:mod:`.main`) and the model options it shares with the web
server (:mod:`.options`).
"""
