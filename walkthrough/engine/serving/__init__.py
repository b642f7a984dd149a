"""Serving features built on an engine's sessions: what a server does around the forward passes.

turns (a conversation in one session, the four calls), speculative (decoding with a drafter), drafters
and mtp (what guesses the next tokens), rounds (what speculative rounds add up to), coldstart (time to
first token from a cold or a warm start). The web server for the app is `walkthrough/serving_web/`.
"""
