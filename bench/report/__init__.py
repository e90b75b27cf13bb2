"""The report: every page `python -m bench report` writes from the rows under results/.

``build`` writes the leaderboard and runs the page modules (``claims``, ``static``, ``curves``,
``method_budget``, ``speed``, ``status``, ``throughput``; figures in ``plots``), which build on the library:
``frontier`` (frontier math on arrays), ``views`` (the per-section views of the rows), ``tables`` (the
leaderboard's tables) and ``page`` (the Markdown/HTML page writer).  This file imports nothing, so a figure
module that needs one page module loads only that one.
"""
