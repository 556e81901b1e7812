"""The local runtime: embedded infrastructure servers and process supervision for `habitus up`.

Nothing here is used when the server URLs are configured (compose, Kubernetes): the embedded
servers only fill in what the environment does not provide.
"""
