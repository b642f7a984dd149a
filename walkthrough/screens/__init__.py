"""One Textual screen per stage of the request."""
