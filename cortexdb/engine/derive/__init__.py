"""Pure derivation functions: extractors, entity normalisation, fact resolution, belief math, episodes."""
