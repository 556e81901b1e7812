from habitus.client import Client, turn

with Client.from_env() as habitus:
    habitus.ingest(turn("dana", "Please keep answers short, no preamble.", "Sure."))
    print(habitus.context("dana").text)
