import time

from habitus.client import Client, turn

with Client.from_env() as habitus:
    habitus.ingest(turn("dana", "I'd rather you skip the intro and keep answers short.", "OK."))
    for _ in range(50):  # learning runs behind the answer: about a second
        context = habitus.context("dana").text
        if "style/preamble" in context:
            break
        time.sleep(0.2)
    print(context)
