"""`walkthrough serve`'s web side: textual-serve wrapped so that no web page can drive it and no visitor
can exhaust the machine (docs/serve.md says what is refused and why).

`guard` holds the pure checks (addresses, token, sizes, packets), `capacity` how many visitors at once
and each app's weight budget, `visitor` one visitor's app process, `server` the aiohttp server that applies them.
"""
