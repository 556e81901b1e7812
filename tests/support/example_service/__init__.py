"""A trivial service that exists only in the tests: what adding a service takes.

Its descriptor, one projection and one migration, nothing else; the projection contract tests,
the erasure test and the deploy-file check all pick it up from the descriptor.
"""
