"""Settings of both tiers.

pytest puts the directory of this file on sys.path, so the helpers both tiers share live beside it
(``launcher_signals``); each tier's own helpers live in its directory.
"""
