"""Reading what users plainly say: statements by meaning, values from the vocabulary.

`text` splits a message into the user's own sentences and clauses; `gates` are the cheap,
rule-based checks that keep most text away from the encoder (no anchor word, a question,
someone else's preference, a hypothetical); `slots` finds values through the vocabulary's
gazetteers; `intents` decides what a clause states by its nearest labelled examples under the
multilingual sentence encoder; `reader` puts them together.
"""
