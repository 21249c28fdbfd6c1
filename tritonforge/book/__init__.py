"""The book's helpers: plots, roofline, Colab, compile introspection. They sit above the ops and
the benchmark harness (they may import both; no op imports them), and chapters import them to
draw, explain and install — never to compute a result the package's ops compute.
"""
