"""The extractor: a language model reads bounded windows of material and proposes facets."""
