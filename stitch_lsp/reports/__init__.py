"""Verdicts and profiles as text a user reads: hover cards, inlay hint labels, Markdown reports.

Plain functions over plain data (no LSP), shared by the editor and the command line.
"""
