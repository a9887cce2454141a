"""The broker's networking: its listeners and the codecs in front of the request handlers."""
